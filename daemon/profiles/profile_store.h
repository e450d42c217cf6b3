// File: daemon/profiles/profile_store.h
//
// Capacity and named workload profiles as the seed keeps them (docs/seed.md, "Profiles"): one
// pretty-printed JSON file per profile key, `ddo-capacity-v1-<24 hex>.json`. ddod stores and
// serves the files; what a record means (contexts, keys, limits, recommendations) is the
// client's, which computes the key from the record's context.
//
// Where the files live (issue 13): ddod writes with its own rights, so a caller never chooses a
// path. ProfileStore::ForUser opens ddod's per-user directory `<root>/<uid>`;
// ProfileStore::ForDirectory opens a caller-named directory and is only for callers that run as
// ddod's own user. Every operation then works relative to the directory's descriptor:
//  - the directory is opened without following a symlink, and must be a directory owned by
//    ddod's effective uid that group and others cannot write; ddod creates a missing one 0700
//    and never chmods or chowns anything it did not create;
//  - a profile file is opened O_NOFOLLOW|O_NONBLOCK and served only when fstat shows a regular
//    file owned by ddod's euid with one link and at most kMaxProfileBytes (a symlink, FIFO,
//    device, directory or hard link planted under a profile's name is refused, never read);
//  - a write goes to a new temporary file with a random name (O_CREAT|O_EXCL|O_NOFOLLOW, 0600),
//    is fsynced and renamed over the profile, so nothing planted in the directory redirects it.
// A file that is not a JSON object is skipped (with a warning) when listed and reported as
// corrupt when asked for. Errors name the key (escaped and truncated) and never quote a file's
// bytes or the size of a file that was refused.
//
// Thread-safety: a ProfileStore is immutable once opened; all methods are const and may be
// called concurrently (writes are atomic renames, listings use their own directory offset).
#ifndef DDO_DAEMON_PROFILES_PROFILE_STORE_H_
#define DDO_DAEMON_PROFILES_PROFILE_STORE_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

// The largest profile ddod stores or serves, in bytes (the JSON text plus its final newline).
inline constexpr size_t kMaxProfileBytes = size_t{1} << 20;
// The most profiles one store (one user's directory) holds: a caller cannot fill ddod's disk.
inline constexpr size_t kMaxProfilesPerStore = 1024;
// The most profile bytes one store holds, and one listing returns: a listing is read whole into
// memory and sent as one message, which must fit a client's default limit (4 MiB in gRPC), and
// a user may list many times at once (the seed's profiles take a few KiB each).
inline constexpr size_t kMaxStoreBytes = size_t{3} << 20;

struct ProfileFile {
  std::string key;   // the 24 hex digits of the file name
  std::string name;  // the record's context "name" (named workload profiles), else ""
  std::string json;  // the file's text, exactly as stored
  int64_t modified_unix_ms = 0;
};

// The directory: `requested` when given, else DDO_PROFILE_DIR of `environment`, else
// ~/.ddo/profiles; a leading "~" is the home directory `home`.
std::string ResolveProfileDir(const std::string& requested, const std::string& environment_dir,
                              const std::string& home);

// InvalidArgument unless `key` is 24 lowercase hex digits (so it never holds '/', "..", NUL or
// a control character); the message quotes the key escaped and truncated.
absl::Status CheckProfileKey(const std::string& key);

class ProfileStore {
 public:
  // What opening does when the directory (or the root above a user's directory) is missing.
  enum class IfMissing {
    kEmpty,   // the store holds no profiles and nothing is created (List, Get, Delete)
    kCreate,  // missing directories are created 0700 (Put)
  };

  // ddod's per-user directory `<root>/<uid>` (uid in decimal). `root` is ddod's own profile
  // directory (absolute; its parents may be symlinks, its last component may not).
  static absl::StatusOr<ProfileStore> ForUser(const std::string& root, uid_t uid,
                                              IfMissing if_missing);
  // A directory the caller named, for a caller running as ddod's own user only (the caller
  // checks that). Absolute; the same checks as ForUser's directories.
  static absl::StatusOr<ProfileStore> ForDirectory(const std::string& path, IfMissing if_missing);

  ProfileStore(ProfileStore&&) noexcept = default;
  ProfileStore& operator=(ProfileStore&&) noexcept = default;
  ProfileStore(const ProfileStore&) = delete;
  ProfileStore& operator=(const ProfileStore&) = delete;

  // Every valid profile, by key; an absent directory holds none. Entries that are not regular
  // files owned by ddod's user with one link, or not JSON objects, are skipped, and so is
  // whatever would take the listing past kMaxStoreBytes (a store filled before that limit).
  absl::StatusOr<std::vector<ProfileFile>> List() const;
  // NotFound when there is none; PermissionDenied when something other than a profile file
  // ddod wrote sits under its name; DataLoss when the file is not a JSON object.
  absl::StatusOr<ProfileFile> Get(const std::string& key) const;
  // Stores `json` (a JSON object of at most kMaxProfileBytes whose "profile_key" is `key`;
  // InvalidArgument otherwise). FailedPrecondition on a store opened with IfMissing::kEmpty
  // whose directory was missing; ResourceExhausted past kMaxProfilesPerStore or
  // kMaxStoreBytes.
  absl::StatusOr<ProfileFile> Put(const std::string& key, const std::string& json) const;
  // False when there was none.
  absl::StatusOr<bool> Delete(const std::string& key) const;

  // The directory, for messages: escaped and truncated.
  const std::string& description() const { return description_; }

 private:
  ProfileStore(UniqueFd directory, std::string description, uid_t owner)
      : directory_(std::move(directory)), description_(std::move(description)), owner_(owner) {}

  UniqueFd directory_;  // invalid when the directory was missing and not created
  std::string description_;
  uid_t owner_;  // ddod's effective uid when the store was opened
};

}  // namespace ddo

#endif  // DDO_DAEMON_PROFILES_PROFILE_STORE_H_
