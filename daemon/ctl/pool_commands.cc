// ddoctl's commands that change the pool: `load KEY PATH... [keep-alive=...]
// [file-tier=...]` and `evict KEY [owner=USER|UID]`.
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/version.h"
#include "daemon/ctl/commands.h"
#include "daemon/ctl/load_inputs.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

using Stub = ddo::v1::Ddo::Stub;

constexpr char kLoadUsage[] =
    "load takes a cache key and one or more *.safetensors files or model folders";
// ddod takes at most this many passed files per connection (docs/security.md).
constexpr size_t kMaxPassedFiles = 256;

struct LoadOperands {
  std::vector<std::string> paths;
  int64_t keep_alive_seconds = 0;  // ddod's default; -1: never
  ddo::v1::FileTier file_tier = ddo::v1::FILE_TIER_AUTO;
};

// `file-tier=auto|never|prefer`.
absl::StatusOr<ddo::v1::FileTier> ParseFileTier(const std::string& value) {
  if (value == "auto") return ddo::v1::FILE_TIER_AUTO;
  if (value == "never") return ddo::v1::FILE_TIER_NEVER;
  if (value == "prefer") return ddo::v1::FILE_TIER_PREFER;
  return absl::InvalidArgumentError(absl::StrCat(
      "file-tier takes auto (in its files when the pool cannot hold it), never or prefer, not '",
      EscapeForDisplay(value), "'"));
}

// The paths, keep-alive and file tier after the key; the usage problem otherwise.
absl::StatusOr<LoadOperands> ParseLoadOperands(const std::vector<std::string>& operands) {
  LoadOperands parsed;
  for (auto it = operands.begin() + 1; it != operands.end(); ++it) {
    if (absl::StartsWith(*it, "file-tier=")) {
      absl::StatusOr<ddo::v1::FileTier> tier =
          ParseFileTier(it->substr(std::string("file-tier=").size()));
      if (!tier.ok()) return tier.status();
      parsed.file_tier = *tier;
      continue;
    }
    if (!absl::StartsWith(*it, "keep-alive=")) {
      parsed.paths.push_back(*it);
      continue;
    }
    const std::string value = it->substr(std::string("keep-alive=").size());
    absl::Duration keep;
    if (value == "never") {
      parsed.keep_alive_seconds = -1;
    } else if (absl::ParseDuration(value, &keep) && keep >= absl::Seconds(1) &&
               keep <= absl::Hours(24 * 365 * 10)) {
      parsed.keep_alive_seconds = absl::ToInt64Seconds(keep);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("keep-alive takes a duration from 1s to 10 years (30m, 2h) or never, not '",
                       EscapeForDisplay(value), "'"));
    }
  }
  if (parsed.paths.empty()) return absl::InvalidArgumentError(kLoadUsage);
  return parsed;
}

// Passes each input over the identity socket and names its handle in the request; false after
// saying which one could not be passed.
bool PassInputs(CtlConnection& connection, const LoadInputs& inputs,
                ddo::v1::LoadSafetensorsRequest* request) {
  // The handle, or 0 after saying why not.
  auto pass = [&connection](const OpenedInput& input) -> uint64_t {
    auto handle = connection.PassFile(input.name, input.fd.get());
    if (handle.ok()) return *handle;
    std::fprintf(stderr, "ddoctl: passing %s: %s\n", EscapeForDisplay(input.path).c_str(),
                 std::string(handle.status().message()).c_str());
    return 0;
  };
  for (const OpenedInput& input : inputs.files) {
    const uint64_t handle = pass(input);
    if (handle == 0) return false;
    request->add_file_handles(handle);
  }
  for (const OpenedInput& index : inputs.index) {
    const uint64_t handle = pass(index);
    if (handle == 0) return false;
    request->set_index_handle(handle);
  }
  return true;
}

// One redraw of the progress bar on stderr: KEY [#####.....] done / total  rate.
void DrawLoadProgress(const std::string& key, const ddo::v1::LoadProgress& progress,
                      absl::Time began) {
  const double done =
      std::min(1.0, static_cast<double>(progress.bytes_done()) / progress.bytes_total());
  const int filled = std::clamp(static_cast<int>(done * 30), 0, 30);
  const double seconds = std::max(1e-3, absl::ToDoubleSeconds(absl::Now() - began));
  std::fprintf(stderr, "\r%s [%s%s] %s / %s  %.1f GB/s ", EscapeForDisplay(key, 32).c_str(),
               std::string(filled, '#').c_str(), std::string(30 - filled, '.').c_str(),
               FormatBytes(progress.bytes_done()).c_str(),
               FormatBytes(progress.bytes_total()).c_str(), progress.bytes_done() / seconds / 1e9);
}

// Streams LoadSafetensors to its end, drawing the bar when `bar`; the last progress message in
// *last.
grpc::Status StreamLoad(CtlConnection& connection, const ddo::v1::LoadSafetensorsRequest& request,
                        bool bar, ddo::v1::LoadProgress* last) {
  grpc::ClientContext load_context;
  connection.Prepare(&load_context);
  load_context.set_deadline(std::chrono::system_clock::time_point::max());
  auto stream = connection.stub().LoadSafetensors(&load_context, request);
  const absl::Time began = absl::Now();
  ddo::v1::LoadProgress progress;
  while (stream->Read(&progress)) {
    *last = progress;
    if (bar && progress.bytes_total() > 0 && !progress.done()) {
      DrawLoadProgress(request.cache_key(), progress, began);
    }
  }
  if (bar) std::fputs("\r\033[K", stderr);
  return stream->Finish();
}

void PrintLoaded(const CtlArgs& args, const ddo::v1::LoadProgress& last) {
  if (args.json) {
    std::fputs((CtlJson(last) + "\n").c_str(), stdout);
    return;
  }
  const ddo::v1::ComponentInfo& component = last.component();
  const bool in_files = component.tier() == ddo::v1::COMPONENT_TIER_FILE;
  std::string where;
  if (last.warm_hit()) {
    where = " (warm: the pool held it already)";
  } else if (in_files) {
    where = " (the file tier: ddod reads them as it streams)";
  } else if (component.tier() == ddo::v1::COMPONENT_TIER_SPLIT) {
    where = absl::StrCat(" (split: ", FormatBytes(component.pool_bytes()), " in the pool, ",
                         FormatBytes(component.file_bytes()), " read from its files)");
  }
  std::printf("%s '%s': %s in %.2f s%s\n", in_files ? "kept in its files" : "loaded",
              EscapeForDisplay(component.ref().cache_key()).c_str(),
              FormatBytes(component.ref().total_bytes()).c_str(), last.seconds(), where.c_str());
}

// A user name or a number, as `ddoctl evict ... owner=` takes it.
absl::StatusOr<uid_t> UidOfUser(const std::string& user) {
  uint32_t number = 0;
  if (absl::SimpleAtoi(user, &number)) return static_cast<uid_t>(number);
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  if (::getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return absl::NotFoundError(absl::StrCat("no user named '", EscapeForDisplay(user, 64), "'"));
  }
  return found->pw_uid;
}

}  // namespace

// A lease for the load (the Connect stream, held while it runs), the files passed as
// descriptors, LoadSafetensors' progress drawn on stderr.
int RunLoadCommand(const CtlArgs& args, CtlConnection& connection) {
  if (args.operands.size() < 2) return CtlUsage(kLoadUsage);
  absl::StatusOr<LoadOperands> operands = ParseLoadOperands(args.operands);
  if (!operands.ok()) return CtlUsage(std::string(operands.status().message()));
  auto inputs = OpenLoadInputs(operands->paths);
  if (inputs.ok() && inputs->files.size() + inputs->index.size() > kMaxPassedFiles) {
    std::fprintf(stderr, "ddoctl: %zu files to load; ddod takes at most %zu at once\n",
                 inputs->files.size() + inputs->index.size(), kMaxPassedFiles);
    return kCtlExitUsage;
  }
  if (!inputs.ok()) {
    std::fprintf(stderr, "ddoctl: %s\n", std::string(inputs.status().message()).c_str());
    return kCtlExitUsage;
  }
  grpc::ClientContext lease_context;
  connection.Prepare(&lease_context);
  lease_context.set_deadline(std::chrono::system_clock::time_point::max());
  ddo::v1::ConnectRequest hello;
  hello.set_client_pid(::getpid());
  hello.set_client_name(absl::StrCat("ddoctl ", kVersion));
  auto lease = connection.stub().Connect(&lease_context, hello);
  ddo::v1::ConnectEvent event;
  if (!lease->Read(&event) || !event.has_connected()) {
    return CtlRpcFailed("Connect", lease->Finish());
  }
  ddo::v1::LoadSafetensorsRequest request;
  request.set_lease_id(event.connected().lease_id());
  request.set_cache_key(args.operands[0]);
  request.set_keep_alive_seconds(operands->keep_alive_seconds);
  request.set_file_tier(operands->file_tier);
  if (!PassInputs(connection, *inputs, &request)) return kCtlExitRpcFailed;
  const bool bar = ::isatty(STDERR_FILENO) != 0 && !args.json;
  ddo::v1::LoadProgress last;
  const grpc::Status finished = StreamLoad(connection, request, bar, &last);
  lease_context.TryCancel();
  lease->Finish();
  if (!finished.ok()) return CtlRpcFailed("LoadSafetensors", finished);
  PrintLoaded(args, last);
  return kCtlExitOk;
}

// Removes an unused component: the caller's, or (ddod's administrator only) owner=USER's.
int RunEvictCommand(const CtlArgs& args, CtlConnection& connection) {
  if (args.operands.empty() || args.operands.size() > 2) {
    return CtlUsage(
        "evict takes one cache key (see `ddoctl components`) and, for ddod's "
        "administrator, owner=USER");
  }
  ddo::v1::EvictComponentRequest request;
  request.set_cache_key(args.operands.front());
  std::string owner_shown;
  if (args.operands.size() == 2) {
    const std::string& word = args.operands[1];
    if (!absl::StartsWith(word, "owner=") || word.size() == 6) {
      return CtlUsage("evict KEY [owner=USER|UID]: the second word must be owner=USER");
    }
    absl::StatusOr<uid_t> owner = UidOfUser(word.substr(6));
    if (!owner.ok()) return CtlUsage(std::string(owner.status().message()));
    request.set_owner_uid(*owner);
    request.set_owner_named(true);
    owner_shown = absl::StrCat(" of ", word.substr(6));
  }
  ddo::v1::EvictComponentResponse response;
  if (auto status = CallDaemon(connection, &Stub::EvictComponent, request, &response);
      !status.ok()) {
    return CtlRpcFailed("EvictComponent", status);
  }
  std::printf("evicted '%s'%s: %s freed\n", EscapeForDisplay(request.cache_key()).c_str(),
              EscapeForDisplay(owner_shown).c_str(), FormatBytes(response.freed_bytes()).c_str());
  return kCtlExitOk;
}

}  // namespace ddo
