// `ddoctl profiles [list] | show KEY | rm KEY`, in this user's profile directory.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "daemon/config/environment.h"
#include "daemon/ctl/commands.h"
#include "daemon/ctl/formatting.h"
#include "daemon/profiles/profile_store.h"

namespace ddo {
namespace {

using Stub = ddo::v1::Ddo::Stub;

// Where the profiles are: the directory sent to ddod, and how messages name it.
struct ProfilePlace {
  std::string dir;
  std::string shown;
};

// ddod honours a profile directory only for its own user; a shared ddod keeps each other
// user's profiles in its per-user store (docs/security.md).
ProfilePlace PlaceOfProfiles(const CtlConnection& connection) {
  const Environment env = ProcessEnvironment();
  const bool own_daemon = connection.daemon_uid() == ::geteuid();
  const std::string dir = own_daemon
                              ? ResolveProfileDir("", Lookup(env, "DDO_PROFILE_DIR").value_or(""),
                                                  Lookup(env, "HOME").value_or(""))
                              : "";
  return {dir, own_daemon ? dir : "ddod's profile store for this user"};
}

int ListProfiles(const CtlArgs& args, CtlConnection& connection, const ProfilePlace& place) {
  ddo::v1::ListProfilesRequest request;
  request.set_profile_dir(place.dir);
  ddo::v1::ListProfilesResponse response;
  if (auto status = CallDaemon(connection, &Stub::ListProfiles, request, &response); !status.ok()) {
    return CtlRpcFailed("ListProfiles", status);
  }
  std::fputs(args.json ? (CtlJson(response) + "\n").c_str()
                       : FormatProfiles(response, place.shown).c_str(),
             stdout);
  return kCtlExitOk;
}

int ShowProfile(const CtlArgs& args, CtlConnection& connection, const ProfilePlace& place,
                const ddo::v1::ProfileRef& ref) {
  ddo::v1::GetProfileRequest request;
  *request.mutable_ref() = ref;
  request.set_profile_dir(place.dir);
  ddo::v1::Profile response;
  if (auto status = CallDaemon(connection, &Stub::GetProfile, request, &response); !status.ok()) {
    return CtlRpcFailed("GetProfile", status);
  }
  std::fputs(args.json ? (CtlJson(response) + "\n").c_str() : response.json().c_str(), stdout);
  return kCtlExitOk;
}

// Exit 1 when there was no such profile.
int RemoveProfile(CtlConnection& connection, const ProfilePlace& place,
                  const ddo::v1::ProfileRef& ref) {
  ddo::v1::DeleteProfileRequest request;
  *request.mutable_ref() = ref;
  request.set_profile_dir(place.dir);
  ddo::v1::DeleteProfileResponse response;
  if (auto status = CallDaemon(connection, &Stub::DeleteProfile, request, &response);
      !status.ok()) {
    return CtlRpcFailed("DeleteProfile", status);
  }
  std::printf("%s profile %s in %s\n", response.deleted() ? "deleted" : "there was no",
              ref.key().c_str(), place.shown.c_str());
  return response.deleted() ? kCtlExitOk : kCtlExitRpcFailed;
}

}  // namespace

int RunProfilesCommand(const CtlArgs& args, CtlConnection& connection) {
  const ProfilePlace place = PlaceOfProfiles(connection);
  const std::string action = args.operands.empty() ? "list" : args.operands.front();
  if (action == "list" && args.operands.size() <= 1) return ListProfiles(args, connection, place);
  if ((action == "show" || action == "rm") && args.operands.size() == 2) {
    ddo::v1::ProfileRef ref;
    ref.set_key(args.operands[1]);
    return action == "show" ? ShowProfile(args, connection, place, ref)
                            : RemoveProfile(connection, place, ref);
  }
  return CtlUsage(
      "profiles takes: list, show KEY or rm KEY (KEY: 24 hex digits, see `ddoctl profiles`)");
}

}  // namespace ddo
