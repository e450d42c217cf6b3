#include "daemon/config/daemon_options.h"

#include "daemon/config/setting_catalog.h"

#include <arpa/inet.h>

#include <map>
#include "absl/strings/string_view.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/config/config_file.h"
#include "daemon/config/paths.h"
#include "daemon/config/values.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

// One setting ddod takes from a flag and/or a DDO_* variable.
struct OptionSpec {
  absl::string_view flag;      // "--ram-budget-gb"; empty for environment-only settings
  absl::string_view variable;  // "DDO_RAM_BUDGET_GB"; empty for flag-only settings
  absl::string_view metavar;
  absl::string_view help;
  // Applies a value; `what` names its origin for error messages.
  absl::Status (*apply)(absl::string_view what, absl::string_view value, DaemonOptions& options);
};

absl::Status ApplyPreset(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  auto preset = ResolvePreset(value);
  if (!preset.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", preset.status().message()));
  }
  o.requested_preset = std::string(value);
  o.preset = *preset;
  return absl::OkStatus();
}

absl::Status ApplySocket(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  if (!absl::StartsWith(value, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid value '", value, "' for ", what, ": expected an absolute path"));
  }
  // sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
  if (value.size() > 107) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value for ", what, ": the path is ",
                                                   value.size(),
                                                   " bytes; Unix socket paths are at most 107"));
  }
  o.socket_path = std::string(value);
  return absl::OkStatus();
}

absl::Status ApplyListen(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  // Loopback only: the protocol carries no authentication, the socket permissions are the
  // access control, and TCP has none of those.
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == value.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid value '", value, "' for ", what, ": expected HOST:PORT"));
  }
  const std::string host(value.substr(0, colon));
  in_addr ipv4{};
  // A numeric 127.x.y.z address, never a name that merely starts with "127.".
  const bool loopback = host == "localhost" || host == "[::1]" ||
                        (::inet_pton(AF_INET, host.c_str(), &ipv4) == 1 &&
                         (ntohl(ipv4.s_addr) >> 24) == 127);
  if (!loopback) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid value '", value, "' for ", what,
        ": ddod listens on loopback only (127.0.0.1, localhost or [::1])"));
  }
  o.listen_address = std::string(value);
  return absl::OkStatus();
}

absl::Status ApplySocketGroup(absl::string_view, absl::string_view value, DaemonOptions& o) {
  o.socket_group = std::string(value);
  return absl::OkStatus();
}

absl::Status ApplyLogFormat(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  auto format = ParseLogFormat(value);
  if (!format.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", format.status().message()));
  }
  o.log_format = *format;
  return absl::OkStatus();
}

absl::Status ApplyLogLevel(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  auto level = ParseLogLevel(value);
  if (!level.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", level.status().message()));
  }
  o.log_level = *level;
  return absl::OkStatus();
}

absl::Status ApplyRamBudget(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.ram_budget_gb, ParseNonNegativeNumber(what, value));
  return absl::OkStatus();
}

absl::Status ApplyRamBudgetScope(absl::string_view what, absl::string_view value,
                                 DaemonOptions& o) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (lower == "runners") {
    o.ram_budget_scope = RamBudgetScope::kRunners;
  } else if (lower == "pool") {
    o.ram_budget_scope = RamBudgetScope::kPool;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("invalid value '", value, "' for ", what,
                                                   ": expected runners or pool"));
  }
  return absl::OkStatus();
}

absl::Status ApplyVramBudget(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.vram_budget_gb, ParseNonNegativeNumber(what, value));
  return absl::OkStatus();
}

absl::Status ApplyHeadroom(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.system_ram_headroom_gb, ParseNonNegativeNumber(what, value));
  return absl::OkStatus();
}

absl::Status ApplyAvailableRam(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.available_ram_override_gb, ParseNonNegativeNumber(what, value));
  return absl::OkStatus();
}

absl::Status ApplyPlatform(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (lower != "linux" && lower != "wsl" && lower != "windows") {
    return absl::InvalidArgumentError(absl::StrCat("invalid value '", value, "' for ", what,
                                                   ": expected linux, wsl or windows"));
  }
  o.platform_override = lower;
  return absl::OkStatus();
}

absl::Status ApplyStateDir(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  if (!absl::StartsWith(value, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid value '", value, "' for ", what, ": expected an absolute path"));
  }
  o.state_dir = std::string(value);
  return absl::OkStatus();
}

absl::Status ApplyParentPid(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.parent_pid, ParsePid(what, value));
  o.discard_pool = true;  // a private daemon leaves nothing behind
  return absl::OkStatus();
}

absl::Status ApplyDiscard(absl::string_view, absl::string_view value, DaemonOptions& o) {
  o.discard_pool = o.discard_pool || ParseSeedBool(value);
  return absl::OkStatus();
}

absl::Status ApplyPinCpuMemory(absl::string_view, absl::string_view value, DaemonOptions& o) {
  o.pin_cpu_memory = ParseSeedBool(value);
  return absl::OkStatus();
}

absl::Status ApplyDisablePinOnWsl(absl::string_view, absl::string_view value, DaemonOptions& o) {
  o.disable_pin_on_wsl = ParseSeedBool(value);
  return absl::OkStatus();
}

absl::StatusOr<int> ParseCount(absl::string_view what, absl::string_view value, int most) {
  int count = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &count) || count < 1 || count > most) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value '", value, "' for ", what,
                                                   ": expected a whole number from 1 to ", most));
  }
  return count;
}

absl::Status ApplyFileReadThreads(absl::string_view what, absl::string_view value,
                                  DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.file_read_threads, ParseCount(what, value, 64));
  return absl::OkStatus();
}

absl::Status ApplyFileStagingBuffers(absl::string_view what, absl::string_view value,
                                     DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.file_staging_buffers, ParseCount(what, value, 32));
  if (o.file_staging_buffers < 2) {
    return absl::InvalidArgumentError(absl::StrCat(what, "=", value, ": from 2 to 32"));
  }
  return absl::OkStatus();
}

absl::Status ApplyPinWorkers(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.pin_workers, ParseCount(what, value, 256));
  return absl::OkStatus();
}

absl::Status ApplyHostDevices(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.host_devices, ParseCount(what, value, 64));
  return absl::OkStatus();
}

absl::Status ApplyMaxLeases(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  // Every lease holds one of gRPC's 512 threads; ddod keeps 384 leases at most in all.
  DDO_ASSIGN_OR_RETURN(o.max_leases_per_user, ParseCount(what, value, 384));
  return absl::OkStatus();
}

absl::Status ApplyMaxUploads(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.max_uploads_per_user, ParseCount(what, value, 1024));
  return absl::OkStatus();
}

absl::Status ApplyMaxSessions(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.max_sessions_per_user, ParseCount(what, value, 65536));
  return absl::OkStatus();
}

absl::Status ApplyMaxConnectionsPerUser(absl::string_view what, absl::string_view value,
                                        DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.max_connections_per_user, ParseCount(what, value, 65536));
  return absl::OkStatus();
}

absl::Status ApplyMaxConnections(absl::string_view what, absl::string_view value,
                                 DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.max_connections, ParseCount(what, value, 1 << 20));
  return absl::OkStatus();
}

absl::Status ApplyDescriptorReserve(absl::string_view what, absl::string_view value,
                                    DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.descriptor_reserve, ParseCount(what, value, 1 << 20));
  return absl::OkStatus();
}

absl::Status ApplyMaxUserPool(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.max_user_pool_gb, ParseNonNegativeNumber(what, value));
  return absl::OkStatus();
}

absl::Status ApplySpillBudget(absl::string_view what, absl::string_view value,
                              DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.spill_budget_gb, ParseNonNegativeNumber(what, value));
  return absl::OkStatus();
}

absl::Status ApplyMaxUserSpill(absl::string_view what, absl::string_view value,
                               DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.max_user_spill_gb, ParseNonNegativeNumber(what, value));
  return absl::OkStatus();
}

absl::Status ApplyPrefaultedReserve(absl::string_view what, absl::string_view value,
                                    DaemonOptions& o) {
  DDO_ASSIGN_OR_RETURN(o.prefaulted_reserve_gb, ParseNonNegativeNumber(what, value));
  return absl::OkStatus();
}

absl::Status ApplyKeepAlive(absl::string_view what, absl::string_view value, DaemonOptions& o) {
  const std::string text = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (text == "never" || text == "forever" || text == "0" || text == "-1") {
    o.keep_alive = absl::InfiniteDuration();
    return absl::OkStatus();
  }
  absl::Duration keep;
  if (!absl::ParseDuration(text, &keep) || keep < absl::Seconds(1) ||
      keep > absl::Hours(24 * 365 * 10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "='", EscapeForDisplay(value),
        "' must be a duration from 1s to 10 years (30m, 2h, 1h30m) or never"));
  }
  o.keep_alive = keep;
  return absl::OkStatus();
}

// --config: the file whose DDO_* lines sit between the preset and the environment.
absl::Status ApplyConfig(absl::string_view, absl::string_view value, DaemonOptions& o) {
  o.config_path = std::string(value);
  return absl::OkStatus();
}

// In the order --help lists them. The preset comes first: later settings may read it.
constexpr OptionSpec kOptions[] = {
    {"--preset", "DDO_PRESET", "NAME", "policy preset (default auto; see `ddoctl presets`)",
     ApplyPreset},
    {"--config", "", "FILE",
     "read DDO_* variables from FILE (NAME=VALUE lines; the environment and flags win over "
     "them), again on SIGHUP", ApplyConfig},
    {"--socket", "DDO_SOCKET", "PATH", "Unix socket to serve on", ApplySocket},
    {"--listen", "DDO_LISTEN", "HOST:PORT", "also serve on loopback TCP (off by default)",
     ApplyListen},
    {"--socket-group", "DDO_SOCKET_GROUP", "GROUP",
     "let GROUP use the socket (mode 0660 instead of 0600)", ApplySocketGroup},
    {"--log-level", "DDO_LOG_LEVEL", "LEVEL", "trace, debug, info, warn, error or off (info)",
     ApplyLogLevel},
    {"--log-format", "DDO_LOG_FORMAT", "FORMAT",
     "text (default) or json: one JSON object per line; under systemd's journal each line "
     "carries its priority", ApplyLogFormat},
    {"--ram-budget-gb", "DDO_RAM_BUDGET_GB", "GIB",
     "host pool budget (default: available RAM minus DDO_SYSTEM_RAM_HEADROOM_GB)",
     ApplyRamBudget},
    {"--ram-budget-scope", "DDO_RAM_BUDGET_SCOPE", "pool|runners",
     "what the RAM budget bounds: pool (default), the pool alone; runners, the pool with "
     "ddod's own memory and the private memory of the runners it serves, so that the machine "
     "keeps what the budget leaves", ApplyRamBudgetScope},
    {"--vram-budget-gb", "DDO_VRAM_BUDGET_GB", "GIB",
     "device memory ddod may allocate per GPU (default: the whole device)", ApplyVramBudget},
    {"--state-dir", "DDO_STATE_DIR", "DIR", "where ddod keeps manifests and profiles",
     ApplyStateDir},
    {"--parent-pid", "", "PID",
     "embedded mode: exit when process PID ends (used by clients that start a private ddod)",
     ApplyParentPid},
    {"--discard", "", "",
     "remove the pool's segments at shutdown (default: keep them warm for the next ddod)",
     ApplyDiscard},
    {"", "DDO_PIN_CPU_MEMORY", "0|1", "page-lock the host pool (the auto and warm_process "
     "presets turn it on)", ApplyPinCpuMemory},
    {"", "DDO_DISABLE_PIN_ON_WSL", "0|1", "never pin on WSL (default 1)", ApplyDisablePinOnWsl},
    {"", "DDO_PIN_CPU_WORKERS", "N", "threads that pre-touch segments before pinning (default 4)",
     ApplyPinWorkers},
    {"", "DDO_FILE_READ_THREADS", "N",
     "threads that read file-tier units from their files (default: the CPUs, 2 to 8)",
     ApplyFileReadThreads},
    {"", "DDO_FILE_STAGING_BUFFERS", "N",
     "staging buffers (each the largest unit) per file-tier session, 2 to 32 (default 4)",
     ApplyFileStagingBuffers},
    {"", "DDO_SYSTEM_RAM_HEADROOM_GB", "GIB",
     "RAM kept free when the RAM budget is derived (default 6; the auto preset sets 8)",
     ApplyHeadroom},
    {"", "DDO_AVAILABLE_SYSTEM_RAM_GB", "GIB", "override the detected available RAM",
     ApplyAvailableRam},
    {"", "DDO_PLATFORM", "linux|wsl|windows",
     "pretend to run on this platform (tests and simulations of the WSL rules)", ApplyPlatform},
    {"--host-devices", "DDO_HOST_DEVICES", "N",
     "host-backend streaming devices cpu, cpu:1 ... cpu:N-1 (tests and simulations of several "
     "devices; default 1)", ApplyHostDevices},
    {"--max-leases-per-user", "DDO_MAX_LEASES_PER_USER", "N",
     "leases (connected clients) one user may hold (default 32; ddod's user and root: no "
     "limit but the total of 384)", ApplyMaxLeases},
    {"--max-uploads-per-user", "DDO_MAX_UPLOADS_PER_USER", "N",
     "uploads and loads one user may have in progress (default 8)", ApplyMaxUploads},
    {"--max-sessions-per-user", "DDO_MAX_SESSIONS_PER_USER", "N",
     "attach and streaming sessions one user may hold (default 256)", ApplyMaxSessions},
    {"--keep-alive", "DDO_KEEP_ALIVE", "DURATION",
     "evict a component unused (no session) for this long, e.g. 30m or 2h (default never: "
     "only the pool's LRU evicts); `ddoctl load ... keep-alive=D` sets one component's",
     ApplyKeepAlive},
    {"--max-user-pool-gb", "DDO_MAX_USER_POOL_GB", "GIB",
     "host pool one user's components may take (default: the whole budget)", ApplyMaxUserPool},
    {"--spill-budget-gb", "DDO_SPILL_BUDGET_GB", "GIB",
     "disk the spill files of uploads may take under the state dir, so that an upload goes to "
     "its file instead of being evicted when the pool is full (default: the RAM budget; 0: "
     "never spill)", ApplySpillBudget},
    {"--max-user-spill-gb", "DDO_MAX_USER_SPILL_GB", "GIB",
     "spill files one user's uploads may take (default: the whole spill budget)",
     ApplyMaxUserSpill},
    {"--prefaulted-reserve-gb", "DDO_PREFAULTED_RESERVE_GB", "GIB",
     "shared memory kept allocated ahead of the next load, part of the RAM budget and given "
     "back to anything that needs room, so that loads read into pages that exist (default: a "
     "quarter of the RAM budget, at most 8, with the warm_process preset; else 0: none)", ApplyPrefaultedReserve},
    {"--max-connections-per-user", "DDO_MAX_CONNECTIONS_PER_USER", "N",
     "connections one user (root and ddod's user too) may hold to each of the gRPC and "
     "identity sockets (default 64); more are closed at once", ApplyMaxConnectionsPerUser},
    {"--max-connections", "DDO_MAX_CONNECTIONS", "N",
     "connections each of the two sockets takes in all (default 1024; root and ddod's user "
     "are bound only by their per-user limit)", ApplyMaxConnections},
    {"--descriptor-reserve", "DDO_DESCRIPTOR_RESERVE", "N",
     "descriptors kept for ddod's own work: no connection is accepted while fewer than N "
     "would be free (default 256, at most half of RLIMIT_NOFILE)", ApplyDescriptorReserve},
};

const OptionSpec* FindFlag(absl::string_view flag) {
  for (const auto& spec : kOptions) {
    if (!spec.flag.empty() && spec.flag == flag) {
      return &spec;
    }
  }
  return nullptr;
}

bool IsOptionVariable(absl::string_view name) {
  for (const auto& spec : kOptions) {
    if (!spec.variable.empty() && spec.variable == name) return true;
  }
  return false;
}

}  // namespace

bool IsDaemonVariable(absl::string_view name) {
  if (IsOptionVariable(name)) return true;
  const std::string text(name);
  return !SettingVariables({{text, "1"}}).empty();
}

namespace {

// Flag values by flag ("--flag value" or "--flag=value"; the last one wins); the keys view
// kOptions' flags.
using FlagValues = std::map<absl::string_view, std::string>;

// Pass 1: collects the flags' values, and notes --help and --version in `options`.
absl::StatusOr<FlagValues> CollectFlagValues(const std::vector<std::string>& args,
                                             DaemonOptions& options) {
  FlagValues flag_values;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--help" || arg == "-h") {
      options.show_help = true;
      continue;
    }
    if (arg == "--version") {
      options.show_version = true;
      continue;
    }
    absl::string_view name = arg;
    std::optional<std::string> value;
    if (const size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
    }
    const OptionSpec* spec = FindFlag(name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown argument '", arg, "'; see ddod --help"));
    }
    if (!value.has_value() && spec->metavar.empty()) {
      value = "1";  // a switch
    } else if (!value.has_value()) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec->flag, " needs a value (", spec->metavar, ")"));
      }
      value = args[++i];
    }
    flag_values[spec->flag] = *std::move(value);
  }
  return flag_values;
}

// The configuration file (--config): under the environment (a variable set in both comes from
// the environment), above the preset. Returns the file's values; fills config_path,
// setting_environment and config_values.
absl::StatusOr<Environment> ReadConfigLayer(const FlagValues& flag_values,
                                            const Environment& env, DaemonOptions& options) {
  Environment file_values;
  if (auto it = flag_values.find("--config"); it != flag_values.end()) {
    if (it->second.empty()) return absl::InvalidArgumentError("--config needs a file name");
    options.config_path = it->second;
    DDO_ASSIGN_OR_RETURN(file_values, ReadConfigFile(it->second, IsDaemonVariable));
  }
  Environment layered = file_values;
  for (const auto& [name, value] : env) layered[name] = value;
  options.setting_environment = SettingVariables(layered);
  options.config_values = std::map<std::string, std::string>(file_values.begin(),
                                                             file_values.end());
  return file_values;
}

// One option's value and where it came from, as messages name it.
struct SourcedValue {
  std::string value;
  std::string what;
};

// `spec`'s value from the highest layer that sets it: flag, environment, configuration file,
// preset; nullopt when none does.
std::optional<SourcedValue> ValueOf(const OptionSpec& spec, const FlagValues& flag_values,
                                    const Environment& env, const Environment& file_values,
                                    const DaemonOptions& options) {
  if (auto it = flag_values.find(spec.flag); !spec.flag.empty() && it != flag_values.end()) {
    return SourcedValue{it->second, std::string(spec.flag)};
  }
  if (spec.variable.empty()) return std::nullopt;
  if (std::optional<std::string> value = Lookup(env, spec.variable); value.has_value()) {
    return SourcedValue{*std::move(value), absl::StrCat(spec.variable, " (environment)")};
  }
  if (std::optional<std::string> value = Lookup(file_values, spec.variable); value.has_value()) {
    return SourcedValue{*std::move(value),
                        absl::StrCat(spec.variable, " (", EscapeForDisplay(options.config_path),
                                     ")")};
  }
  if (options.preset == nullptr) return std::nullopt;
  if (std::optional<std::string> value = options.preset->Find(spec.variable); value.has_value()) {
    return SourcedValue{*std::move(value),
                        absl::StrCat(spec.variable, " (preset ", options.preset->name, ")")};
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<DaemonOptions> ResolveDaemonOptions(const std::vector<std::string>& args,
                                                   const Environment& env,
                                                   const UserContext& user) {
  DaemonOptions options;
  DDO_ASSIGN_OR_RETURN(const FlagValues flag_values, CollectFlagValues(args, options));
  if (options.show_help || options.show_version) {
    return options;
  }
  DDO_ASSIGN_OR_RETURN(const Environment file_values, ReadConfigLayer(flag_values, env, options));

  // Pass 2: defaults < preset < configuration file < environment < flags, setting by setting.
  DDO_RETURN_IF_ERROR(ApplyPreset("the default preset", kDefaultDaemonPreset, options));
  options.socket_path = DefaultSocketPath(user);
  options.state_dir = DefaultStateDir(user);
  for (const auto& spec : kOptions) {
    if (std::optional<SourcedValue> value = ValueOf(spec, flag_values, env, file_values, options);
        value.has_value()) {
      DDO_RETURN_IF_ERROR(spec.apply(value->what, value->value, options));
    }
  }
  return options;
}

std::string DaemonUsage(const UserContext& user) {
  std::string text = absl::StrCat(
      "ddod: the DDO daemon. Owns pinned host pools, device memory and warm caches of model\n"
      "weights, and serves them to runner processes (Diffusers, libtorch) over gRPC.\n\n"
      "usage: ddod [options]\n\n"
      "options (each also read from the DDO_* variable shown; a flag wins over it):\n");
  for (const auto& spec : kOptions) {
    std::string left = spec.flag.empty()
                           ? absl::StrCat("  ", spec.variable, "=", spec.metavar)
                           : absl::StrCat("  ", spec.flag, spec.metavar.empty() ? "" : " ",
                                          spec.metavar);
    if (left.size() < 32) {
      left.resize(32, ' ');
    } else {
      left += "\n" + std::string(32, ' ');
    }
    absl::StrAppend(&text, left, spec.help);
    if (!spec.flag.empty() && !spec.variable.empty()) {
      absl::StrAppend(&text, " [", spec.variable, "]");
    }
    absl::StrAppend(&text, "\n");
  }
  absl::StrAppend(&text,
                  "  --help                        this text\n"
                  "  --version                     print the version and exit\n\n"
                  "defaults for this user:\n"
                  "  socket     ",
                  DefaultSocketPath(user),
                  "\n"
                  "  state dir  ",
                  DefaultStateDir(user),
                  "\n\n"
                  "presets: ",
                  ValidPresetNames(),
                  "\n\n"
                  "signals: SIGTERM and SIGINT stop ddod cleanly; SIGHUP reads --config again and\n"
                  "applies what can change while running (the log level, the DDO_* settings\n"
                  "layer); under systemd, ddod reports READY, STATUS, RELOADING and the watchdog.\n\n"
                  "exit status: 0 after a clean shutdown (SIGTERM, SIGINT), 2 for a bad command\n"
                  "line or configuration file, 3 when another ddod already serves the socket, 1 for\n"
                  "other failures.\n");
  return text;
}

}  // namespace ddo
