// ddoctl: look at and manage a running ddod. See `ddoctl --help`.
#include <grpcpp/client_context.h>

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/common/display_text.h"
#include "daemon/common/format_bytes.h"
#include "daemon/common/version.h"
#include "daemon/config/environment.h"
#include "daemon/config/paths.h"
#include "daemon/ctl/ctl_connection.h"
#include "daemon/ctl/formatting.h"
#include "daemon/ctl/json_output.h"
#include "daemon/ctl/layout_file.h"
#include "daemon/ctl/load_inputs.h"
#include "daemon/ctl/metrics_text.h"
#include "daemon/ctl/top_view.h"
#include "daemon/profiles/profile_store.h"
#include "ddo/wire/daemon_address.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitRpcFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDaemon = 3;

constexpr char kUsage[] =
    "ddoctl: look at and manage a running ddod.\n\n"
    "usage: ddoctl [--daemon ADDR] [--timeout SECONDS] [--json] COMMAND [ARGS]\n\n"
    "commands:\n"
    "  status           daemon version, health, platform, RAM, devices\n"
    "  presets [NAME]   the preset table, or one preset's DDO_* values\n"
    "  settings [preset=NAME] [component=NAME ...] [DDO_X=VALUE ...]\n"
    "                   the DDO_* settings a runner with this shell's environment gets,\n"
    "                   each with its source (DDO_X=VALUE: explicit overrides)\n"
    "  plan --explain LAYOUT.json [DDO_X=VALUE ...]\n"
    "                   ddod's whole decision for a component layout (route, resident\n"
    "                   budget, units, ring), without loading weights\n"
    "  stats            uptime, leases, pool accounting, RPC counts\n"
    "  metrics          the same counters and more (bytes streamed, warm slab hits, RPC\n"
    "                   latencies) in the Prometheus text format, for node_exporter's\n"
    "                   textfile collector\n"
    "  sessions         connected clients (leases) and their sessions\n"
    "  top [-n COUNT] [SECONDS [COUNT]]\n"
    "                   a live view redrawn every SECONDS (1): pool, streaming bandwidth,\n"
    "                   stalls, warm slabs, each session's rate; COUNT screens, then exit\n"
    "                   (default: until interrupted on a terminal, else one, like\n"
    "                   `top -b -n 1`)\n"
    "  components       the components in the host pool\n"
    "  load KEY PATH... [keep-alive=30m|never]\n"
    "                   preload safetensors files or a model folder into the pool under KEY\n"
    "                   (ddoctl opens them with your rights), with a progress bar; evicted\n"
    "                   after the keep-alive unused (default: ddod's --keep-alive)\n"
    "  evict KEY [owner=USER|UID]\n"
    "                   remove an unused component from the pool: yours, or (ddod's\n"
    "                   administrator only) the one USER holds under KEY; keys are names\n"
    "                   inside each user, as `ddoctl components` shows them\n"
    "  profiles [list]  capacity and workload profiles (DDO_PROFILE_DIR, else ~/.ddo/profiles)\n"
    "  profiles show KEY | profiles rm KEY\n"
    "                   one profile's stored JSON; delete it\n\n"
    "options:\n"
    "  --daemon ADDR    unix:/path, /path or host:port (default: DDO_DAEMON, else the\n"
    "                   user's socket, then /run/ddo/ddod.sock)\n"
    "  --timeout S      seconds to wait for each answer (default 5)\n"
    "  --json           print the daemon's answer as JSON\n"
    "  --version        ddoctl's version and protocol\n"
    "  -h, --help       this text\n\n"
    "exit status: 0 ok, 1 the daemon refused the request, 2 bad command line, 3 no daemon.\n";

// A user name or a number, as `ddoctl evict ... owner=` takes it.
absl::StatusOr<uid_t> UidOfUser(const std::string& user) {
  uint32_t number = 0;
  if (absl::SimpleAtoi(user, &number)) return static_cast<uid_t>(number);
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  if (::getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no user named '", ddo::EscapeForDisplay(user, 64), "'"));
  }
  return found->pw_uid;
}

struct CtlArgs {
  std::optional<std::string> daemon;
  double timeout_seconds = 5;
  bool json = false;
  std::string command;
  std::vector<std::string> operands;
};

// A bad command line: what was wrong and where the help is, not the whole help.
int Usage(const std::string& problem) {
  std::fprintf(stderr, "ddoctl: %s (see `ddoctl --help`)\n", problem.c_str());
  return kExitUsage;
}

// Non-ASCII escaped (\uXXXX: no raw control or bidi characters reach the terminal), invalid
// UTF-8 in a daemon's strings replaced instead of throwing.
std::string Dump(const nlohmann::json& json) {
  return json.dump(2, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
}

std::string ToJson(const google::protobuf::Message& message) {
  return Dump(ddo::MessageToPlainJson(message));
}

int RpcFailed(const char* method, const grpc::Status& status) {
  std::fprintf(stderr, "ddoctl: %s failed: %s\n", method, status.error_message().c_str());
  return kExitRpcFailed;
}

// Runs one unary RPC with the connection's deadline.
template <typename Request, typename Response, typename Method>
grpc::Status Call(ddo::CtlConnection& connection, Method method, const Request& request,
                  Response* response) {
  grpc::ClientContext context;
  connection.Prepare(&context);
  return (connection.stub().*method)(&context, request, response);
}

// `ddoctl load KEY PATH...`: a lease for the load (the Connect stream, held while it runs),
// the files passed as descriptors, LoadSafetensors' progress drawn on stderr.
int RunLoad(const CtlArgs& args, ddo::CtlConnection& connection) {
  if (args.operands.size() < 2) {
    return Usage("load takes a cache key and one or more *.safetensors files or model folders");
  }
  const std::string& key = args.operands[0];
  std::vector<std::string> paths;
  int64_t keep_alive_seconds = 0;  // ddod's default
  for (auto it = args.operands.begin() + 1; it != args.operands.end(); ++it) {
    if (!absl::StartsWith(*it, "keep-alive=")) {
      paths.push_back(*it);
      continue;
    }
    const std::string value = it->substr(std::string("keep-alive=").size());
    absl::Duration keep;
    if (value == "never") {
      keep_alive_seconds = -1;
    } else if (absl::ParseDuration(value, &keep) && keep >= absl::Seconds(1) &&
               keep <= absl::Hours(24 * 365 * 10)) {
      keep_alive_seconds = absl::ToInt64Seconds(keep);
    } else {
      return Usage(absl::StrCat("keep-alive takes a duration from 1s to 10 years (30m, 2h) or "
                                "never, not '", ddo::EscapeForDisplay(value), "'"));
    }
  }
  if (paths.empty()) {
    return Usage("load takes a cache key and one or more *.safetensors files or model folders");
  }
  auto inputs = ddo::OpenLoadInputs(paths);
  // ddod takes at most this many passed files per connection (docs/security.md).
  constexpr size_t kMaxPassedFiles = 256;
  if (inputs.ok() && inputs->files.size() + inputs->index.size() > kMaxPassedFiles) {
    std::fprintf(stderr, "ddoctl: %zu files to load; ddod takes at most %zu at once\n",
                 inputs->files.size() + inputs->index.size(), kMaxPassedFiles);
    return kExitUsage;
  }
  if (!inputs.ok()) {
    std::fprintf(stderr, "ddoctl: %s\n", std::string(inputs.status().message()).c_str());
    return kExitUsage;
  }
  grpc::ClientContext lease_context;
  connection.Prepare(&lease_context);
  lease_context.set_deadline(std::chrono::system_clock::time_point::max());
  ddo::v1::ConnectRequest hello;
  hello.set_client_pid(::getpid());
  hello.set_client_name(absl::StrCat("ddoctl ", ddo::kVersion));
  auto lease = connection.stub().Connect(&lease_context, hello);
  ddo::v1::ConnectEvent event;
  if (!lease->Read(&event) || !event.has_connected()) {
    return RpcFailed("Connect", lease->Finish());
  }
  ddo::v1::LoadSafetensorsRequest request;
  request.set_lease_id(event.connected().lease_id());
  request.set_cache_key(key);
  request.set_keep_alive_seconds(keep_alive_seconds);
  // Each file passed over the identity socket: its handle, or 0 after saying why not.
  auto pass = [&connection](const ddo::OpenedInput& input) -> uint64_t {
    auto handle = connection.PassFile(input.name, input.fd.get());
    if (handle.ok()) return *handle;
    std::fprintf(stderr, "ddoctl: passing %s: %s\n", ddo::EscapeForDisplay(input.path).c_str(),
                 std::string(handle.status().message()).c_str());
    return 0;
  };
  for (const ddo::OpenedInput& input : inputs->files) {
    const uint64_t handle = pass(input);
    if (handle == 0) return kExitRpcFailed;
    request.add_file_handles(handle);
  }
  for (const ddo::OpenedInput& index : inputs->index) {
    const uint64_t handle = pass(index);
    if (handle == 0) return kExitRpcFailed;
    request.set_index_handle(handle);
  }
  grpc::ClientContext load_context;
  connection.Prepare(&load_context);
  load_context.set_deadline(std::chrono::system_clock::time_point::max());
  auto stream = connection.stub().LoadSafetensors(&load_context, request);
  const bool bar = ::isatty(STDERR_FILENO) != 0 && !args.json;
  const absl::Time began = absl::Now();
  ddo::v1::LoadProgress progress, last;
  while (stream->Read(&progress)) {
    last = progress;
    if (bar && progress.bytes_total() > 0 && !progress.done()) {
      const double done = std::min(
          1.0, static_cast<double>(progress.bytes_done()) / progress.bytes_total());
      const int filled = std::clamp(static_cast<int>(done * 30), 0, 30);
      const double seconds = std::max(1e-3, absl::ToDoubleSeconds(absl::Now() - began));
      std::fprintf(stderr, "\r%s [%s%s] %s / %s  %.1f GB/s ", ddo::EscapeForDisplay(key, 32).c_str(),
                   std::string(filled, '#').c_str(), std::string(30 - filled, '.').c_str(),
                   ddo::FormatBytes(progress.bytes_done()).c_str(),
                   ddo::FormatBytes(progress.bytes_total()).c_str(),
                   progress.bytes_done() / seconds / 1e9);
    }
  }
  if (bar) std::fputs("\r\033[K", stderr);
  const grpc::Status finished = stream->Finish();
  lease_context.TryCancel();
  lease->Finish();
  if (!finished.ok()) return RpcFailed("LoadSafetensors", finished);
  if (args.json) {
    std::fputs((ToJson(last) + "\n").c_str(), stdout);
  } else {
    std::printf("loaded '%s': %s in %.2f s%s\n",
                ddo::EscapeForDisplay(last.component().ref().cache_key()).c_str(),
                ddo::FormatBytes(last.component().ref().total_bytes()).c_str(), last.seconds(),
                last.warm_hit() ? " (warm: the pool held it already)" : "");
  }
  return kExitOk;
}

// `ddoctl top [-n COUNT] [SECONDS [COUNT]]`: redraws ddoctl's view of ddod every SECONDS. On a
// terminal it runs until interrupted; piped or redirected, it prints one screen and exits, as
// `top -b -n 1` does, unless a COUNT says otherwise.
int RunTop(const CtlArgs& args, ddo::CtlConnection& connection) {
  using Stub = ddo::v1::Ddo::Stub;
  constexpr char kTopUsage[] =
      "top takes [-n COUNT] [SECONDS [COUNT]]: SECONDS from 0.1 to 3600, COUNT at least 1";
  const bool terminal = ::isatty(STDOUT_FILENO) != 0;
  double interval = 1;
  std::optional<int64_t> count;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.operands.size(); ++i) {
    if (args.operands[i] != "-n") {
      positional.push_back(args.operands[i]);
      continue;
    }
    int64_t screens = 0;
    if (count || i + 1 >= args.operands.size() ||
        !absl::SimpleAtoi(args.operands[++i], &screens) || screens < 1) {
      return Usage(kTopUsage);
    }
    count = screens;
  }
  if (positional.size() > 2 ||
      (!positional.empty() &&
       (!absl::SimpleAtod(positional[0], &interval) || !(interval >= 0.1) || interval > 3600))) {
    return Usage(kTopUsage);
  }
  if (positional.size() == 2) {
    int64_t screens = 0;
    if (count || !absl::SimpleAtoi(positional[1], &screens) || screens < 1) {
      return Usage(kTopUsage);
    }
    count = screens;
  }
  if (!count && !terminal) count = 1;
  ddo::v1::DaemonInfo info;
  if (auto status = Call(connection, &Stub::GetInfo, ddo::v1::GetInfoRequest(), &info);
      !status.ok()) {
    return RpcFailed("GetInfo", status);
  }
  std::optional<ddo::TopSnapshot> before;
  for (int64_t screen = 0; !count || screen < *count; ++screen) {
    if (screen > 0) absl::SleepFor(absl::Seconds(interval));
    ddo::TopSnapshot now;
    now.taken = absl::Now();
    if (auto status = Call(connection, &Stub::GetStats, ddo::v1::GetStatsRequest(), &now.stats);
        !status.ok()) {
      return RpcFailed("GetStats", status);
    }
    if (auto status = Call(connection, &Stub::ListSessions, ddo::v1::ListSessionsRequest(),
                           &now.sessions);
        !status.ok()) {
      return RpcFailed("ListSessions", status);
    }
    if (auto status = Call(connection, &Stub::ListComponents, ddo::v1::ListComponentsRequest(),
                           &now.components);
        !status.ok()) {
      return RpcFailed("ListComponents", status);
    }
    if (terminal) std::fputs("\033[H\033[2J", stdout);  // home, clear
    if (!terminal && screen > 0) std::fputs("\n", stdout);  // a blank line between screens
    std::fputs(ddo::FormatTop(info, now, before).c_str(), stdout);
    std::fflush(stdout);
    before = std::move(now);
  }
  return kExitOk;
}

// `ddoctl profiles [list] | show KEY | rm KEY`, in this user's profile directory.
int RunProfiles(const CtlArgs& args, ddo::CtlConnection& connection) {
  using Stub = ddo::v1::Ddo::Stub;
  const ddo::Environment env = ddo::ProcessEnvironment();
  // ddod honours a profile directory only for its own user; a shared ddod keeps each other
  // user's profiles in its per-user store (docs/security.md).
  const bool own_daemon = connection.daemon_uid() == ::geteuid();
  const std::string dir =
      own_daemon ? ddo::ResolveProfileDir("", ddo::Lookup(env, "DDO_PROFILE_DIR").value_or(""),
                                          ddo::Lookup(env, "HOME").value_or(""))
                 : "";
  const std::string shown_dir = own_daemon ? dir : "ddod's profile store for this user";
  const std::string action = args.operands.empty() ? "list" : args.operands.front();
  if (action == "list" && args.operands.size() <= 1) {
    ddo::v1::ListProfilesRequest request;
    request.set_profile_dir(dir);
    ddo::v1::ListProfilesResponse response;
    if (auto status = Call(connection, &Stub::ListProfiles, request, &response); !status.ok()) {
      return RpcFailed("ListProfiles", status);
    }
    std::fputs(args.json ? (ToJson(response) + "\n").c_str()
                         : ddo::FormatProfiles(response, shown_dir).c_str(),
               stdout);
    return kExitOk;
  }
  if ((action == "show" || action == "rm") && args.operands.size() == 2) {
    ddo::v1::ProfileRef ref;
    ref.set_key(args.operands[1]);
    if (action == "show") {
      ddo::v1::GetProfileRequest request;
      *request.mutable_ref() = ref;
      request.set_profile_dir(dir);
      ddo::v1::Profile response;
      if (auto status = Call(connection, &Stub::GetProfile, request, &response); !status.ok()) {
        return RpcFailed("GetProfile", status);
      }
      std::fputs(args.json ? (ToJson(response) + "\n").c_str() : response.json().c_str(), stdout);
      return kExitOk;
    }
    ddo::v1::DeleteProfileRequest request;
    *request.mutable_ref() = ref;
    request.set_profile_dir(dir);
    ddo::v1::DeleteProfileResponse response;
    if (auto status = Call(connection, &Stub::DeleteProfile, request, &response); !status.ok()) {
      return RpcFailed("DeleteProfile", status);
    }
    std::printf("%s profile %s in %s\n", response.deleted() ? "deleted" : "there was no",
                ref.key().c_str(), shown_dir.c_str());
    return response.deleted() ? kExitOk : kExitRpcFailed;
  }
  return Usage("profiles takes: list, show KEY or rm KEY (KEY: 24 hex digits, see `ddoctl profiles`)");
}

int RunCommand(const CtlArgs& args, ddo::CtlConnection& connection) {
  using Stub = ddo::v1::Ddo::Stub;
  if (args.command == "status") {
    ddo::v1::DaemonInfo info;
    if (auto status = Call(connection, &Stub::GetInfo, ddo::v1::GetInfoRequest(), &info);
        !status.ok()) {
      return RpcFailed("GetInfo", status);
    }
    if (args.json) {
      const nlohmann::json answer = {{"health", connection.health()},
                                     {"info", ddo::MessageToPlainJson(info)}};
      std::printf("%s\n", Dump(answer).c_str());
    } else {
      std::fputs(ddo::FormatStatus(info, connection.health()).c_str(), stdout);
    }
    return kExitOk;
  }
  if (args.command == "presets") {
    ddo::v1::ListPresetsResponse presets;
    if (auto status = Call(connection, &Stub::ListPresets, ddo::v1::ListPresetsRequest(),
                           &presets);
        !status.ok()) {
      return RpcFailed("ListPresets", status);
    }
    if (args.json) {
      const google::protobuf::Message* answer = &presets;
      if (!args.operands.empty()) {
        answer = ddo::FindPreset(presets, args.operands.front());
        if (answer == nullptr) {
          std::fputs(ddo::NoSuchPreset(presets, args.operands.front()).c_str(), stderr);
          return kExitUsage;
        }
      }
      std::fputs(ToJson(*answer).c_str(), stdout);
      std::fputs("\n", stdout);
      return kExitOk;
    }
    if (args.operands.empty()) {
      std::fputs(ddo::FormatPresetList(presets).c_str(), stdout);
      return kExitOk;
    }
    bool found = false;
    const std::string text = ddo::FormatPreset(presets, args.operands.front(), &found);
    std::fputs(text.c_str(), found ? stdout : stderr);
    return found ? kExitOk : kExitUsage;
  }
  if (args.command == "settings") {
    ddo::v1::ResolveSettingsRequest request;
    for (const std::string& operand : args.operands) {
      const size_t equals = operand.find('=');
      if (equals == std::string::npos || equals == 0) {
        return Usage(absl::StrCat("settings takes preset=NAME, component=NAME or DDO_X=VALUE, not '",
                                  operand, "'"));
      }
      const std::string key = operand.substr(0, equals);
      const std::string value = operand.substr(equals + 1);
      if (key == "preset") {
        request.set_preset(value);
      } else if (key == "component") {
        request.add_components(value);
      } else {
        (*request.mutable_overrides())[key] = value;
      }
    }
    for (const auto& [name, value] : ddo::ProcessEnvironment()) {
      if (name.rfind("DDO_", 0) == 0) (*request.mutable_environment())[name] = value;
    }
    ddo::v1::ResolvedSettings resolved;
    if (auto status = Call(connection, &Stub::ResolveSettings, request, &resolved); !status.ok()) {
      return RpcFailed("ResolveSettings", status);
    }
    std::fputs(args.json ? ToJson(resolved).c_str() : ddo::FormatSettings(resolved).c_str(),
               stdout);
    return kExitOk;
  }
  if (args.command == "plan") {
    if (args.operands.size() < 2 || args.operands[0] != "--explain") {
      return Usage("plan takes --explain LAYOUT.json [DDO_X=VALUE ...]");
    }
    absl::StatusOr<ddo::v1::ExplainPlanRequest> request = ddo::ReadLayoutFile(args.operands[1]);
    if (!request.ok()) return Usage(std::string(request.status().message()));
    // The shell's DDO_* settings, then the command line's, over the file's.
    for (const auto& [name, value] : ddo::ProcessEnvironment()) {
      if (name.rfind("DDO_", 0) == 0 && name != "DDO_DAEMON") (*request->mutable_settings())[name] = value;
    }
    for (size_t i = 2; i < args.operands.size(); ++i) {
      const std::string& operand = args.operands[i];
      const size_t equals = operand.find('=');
      if (equals == std::string::npos || equals == 0) {
        return Usage(absl::StrCat("plan settings are DDO_X=VALUE, not '", operand, "'"));
      }
      (*request->mutable_settings())[operand.substr(0, equals)] = operand.substr(equals + 1);
    }
    ddo::v1::PlanExplanation plan;
    if (auto status = Call(connection, &Stub::ExplainPlan, *request, &plan); !status.ok()) {
      return RpcFailed("ExplainPlan", status);
    }
    std::fputs(args.json ? ToJson(plan).c_str() : ddo::FormatPlan(plan).c_str(), stdout);
    return kExitOk;
  }
  if (args.command == "stats") {
    ddo::v1::Stats stats;
    if (auto status = Call(connection, &Stub::GetStats, ddo::v1::GetStatsRequest(), &stats);
        !status.ok()) {
      return RpcFailed("GetStats", status);
    }
    std::fputs(args.json ? (ToJson(stats) + "\n").c_str() : ddo::FormatStats(stats).c_str(),
               stdout);
    return kExitOk;
  }
  if (args.command == "metrics") {
    ddo::v1::DaemonInfo info;
    if (auto status = Call(connection, &Stub::GetInfo, ddo::v1::GetInfoRequest(), &info);
        !status.ok()) {
      return RpcFailed("GetInfo", status);
    }
    ddo::v1::Stats stats;
    if (auto status = Call(connection, &Stub::GetStats, ddo::v1::GetStatsRequest(), &stats);
        !status.ok()) {
      return RpcFailed("GetStats", status);
    }
    std::fputs(ddo::FormatMetrics(info, stats).c_str(), stdout);
    return kExitOk;
  }
  if (args.command == "sessions") {
    ddo::v1::ListSessionsResponse sessions;
    if (auto status = Call(connection, &Stub::ListSessions, ddo::v1::ListSessionsRequest(),
                           &sessions);
        !status.ok()) {
      return RpcFailed("ListSessions", status);
    }
    std::fputs(
        args.json ? (ToJson(sessions) + "\n").c_str() : ddo::FormatSessions(sessions).c_str(),
        stdout);
    return kExitOk;
  }
  if (args.command == "components") {
    ddo::v1::ListComponentsResponse components;
    if (auto status = Call(connection, &Stub::ListComponents, ddo::v1::ListComponentsRequest(),
                           &components);
        !status.ok()) {
      return RpcFailed("ListComponents", status);
    }
    std::fputs(args.json ? (ToJson(components) + "\n").c_str()
                         : ddo::FormatComponents(components, ::getuid()).c_str(),
               stdout);
    return kExitOk;
  }
  if (args.command == "evict") {
    if (args.operands.empty() || args.operands.size() > 2) {
      return Usage("evict takes one cache key (see `ddoctl components`) and, for ddod's "
                   "administrator, owner=USER");
    }
    ddo::v1::EvictComponentRequest request;
    request.set_cache_key(args.operands.front());
    std::string owner_shown;
    if (args.operands.size() == 2) {
      const std::string& word = args.operands[1];
      if (!absl::StartsWith(word, "owner=") || word.size() == 6) {
        return Usage("evict KEY [owner=USER|UID]: the second word must be owner=USER");
      }
      absl::StatusOr<uid_t> owner = UidOfUser(word.substr(6));
      if (!owner.ok()) return Usage(std::string(owner.status().message()));
      request.set_owner_uid(*owner);
      request.set_owner_named(true);
      owner_shown = absl::StrCat(" of ", word.substr(6));
    }
    ddo::v1::EvictComponentResponse response;
    if (auto status = Call(connection, &Stub::EvictComponent, request, &response); !status.ok()) {
      return RpcFailed("EvictComponent", status);
    }
    std::printf("evicted '%s'%s: %s freed\n", ddo::EscapeForDisplay(request.cache_key()).c_str(),
                ddo::EscapeForDisplay(owner_shown).c_str(),
                ddo::FormatBytes(response.freed_bytes()).c_str());
    return kExitOk;
  }
  if (args.command == "profiles") return RunProfiles(args, connection);
  if (args.command == "load") return RunLoad(args, connection);
  if (args.command == "top") return RunTop(args, connection);
  return Usage(absl::StrCat("unknown command '", args.command, "'"));
}

}  // namespace

int main(int argc, char** argv) {
  CtlArgs args;
  std::vector<std::string> words(argv + 1, argv + argc);
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    auto next_word = [&]() -> std::optional<std::string> {
      if (i + 1 >= words.size()) return std::nullopt;
      return words[++i];
    };
    if (word == "--help" || word == "-h" || word == "help") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    } else if (word == "--version") {
      std::printf("ddoctl %s (protocol %s)\n", ddo::kVersion, ddo::kApiVersion);
      return kExitOk;
    } else if (word == "--json") {
      args.json = true;
    } else if (word == "--daemon") {
      args.daemon = next_word();
      if (!args.daemon) return Usage("--daemon needs an address");
    } else if (word == "--timeout") {
      auto text = next_word();
      if (!text || !absl::SimpleAtod(*text, &args.timeout_seconds) || args.timeout_seconds <= 0) {
        return Usage("--timeout needs a number of seconds > 0");
      }
    } else if (word == "--explain" && args.command == "plan") {
      args.operands.push_back(word);  // plan's own option
    } else if (word.rfind("--", 0) == 0) {
      return Usage(absl::StrCat("unknown option '", word, "'"));
    } else if (args.command.empty()) {
      args.command = word;
    } else {
      args.operands.push_back(word);
    }
  }
  if (args.command.empty()) {
    std::fputs(kUsage, stderr);  // nothing asked: the whole help
    return kExitUsage;
  }
  static const std::set<std::string> kCommands = {
      "status", "presets", "settings", "plan",  "stats",
      "metrics", "sessions", "top", "components", "load", "evict", "profiles"};
  if (kCommands.count(args.command) == 0) {
    return Usage(absl::StrCat("unknown command '", args.command, "'"));
  }
  if (args.command == "presets" && args.operands.size() > 1) {
    return Usage("presets takes at most one NAME");
  }

  const ddo::Environment env = ddo::ProcessEnvironment();
  const ddo::UserContext user = ddo::UserContext::FromProcess(env);
  auto targets = ddo::ResolveDaemonTargets(
      args.daemon.has_value() ? args.daemon : ddo::Lookup(env, "DDO_DAEMON"),
      ddo::SocketUserOf(user));
  if (!targets.ok()) {
    return Usage(std::string(targets.status().message()));
  }
  if (targets->embedded) {
    return Usage(
        "DDO_DAEMON=embedded names a client's private daemon, which ddoctl cannot reach; "
        "unset DDO_DAEMON or pass --daemon ADDR");
  }
  auto connection =
      ddo::CtlConnection::Open(*targets, absl::Seconds(args.timeout_seconds));
  if (!connection.ok()) {
    std::fprintf(stderr, "ddoctl: %s\n", std::string(connection.status().message()).c_str());
    return kExitNoDaemon;
  }
  return RunCommand(args, *connection);
}
