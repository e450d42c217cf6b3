#include "daemon/config/daemon_options.h"

#include <fstream>

#include "daemon/common/temp_dir_for_test.h"
#include "daemon/config/values.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

UserContext TestUser() {
  UserContext user;
  user.uid = 1000;
  user.home = "/home/ann";
  user.xdg_runtime_dir = "/run/user/1000";
  return user;
}

absl::StatusOr<DaemonOptions> Resolve(std::vector<std::string> args, Environment env = {}) {
  return ResolveDaemonOptions(args, env, TestUser());
}

std::string ErrorOf(std::vector<std::string> args, Environment env = {}) {
  auto options = Resolve(std::move(args), std::move(env));
  EXPECT_FALSE(options.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(options.status()));
  return std::string(options.status().message());
}

TEST(DaemonOptionsTest, Defaults) {
  auto options = Resolve({});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->requested_preset, "auto");
  EXPECT_EQ(options->preset->name, "one_shot_fast");
  EXPECT_EQ(options->socket_path, "/run/user/1000/ddo/ddod.sock");
  EXPECT_EQ(options->state_dir, "/home/ann/.local/state/ddo");
  EXPECT_EQ(options->listen_address, "");
  EXPECT_EQ(options->log_level, spdlog::level::info);
  EXPECT_FALSE(options->ram_budget_gb.has_value());
  EXPECT_FALSE(options->parent_pid.has_value());
  // one_shot_fast (what auto resolves to) sets the RAM headroom to 8 GiB and pins.
  EXPECT_DOUBLE_EQ(options->system_ram_headroom_gb, 8);
  EXPECT_TRUE(options->pin_cpu_memory);
  EXPECT_TRUE(options->disable_pin_on_wsl);
  EXPECT_EQ(options->pin_workers, 4);
  EXPECT_FALSE(options->discard_pool);
}

TEST(DaemonOptionsTest, PoolSwitches) {
  EXPECT_TRUE(Resolve({"--discard"})->discard_pool);
  EXPECT_TRUE(Resolve({"--parent-pid", "99"})->discard_pool) << "embedded daemons discard";
  EXPECT_FALSE(Resolve({"--preset", "low_ram_safe"})->pin_cpu_memory);
  auto pinned = Resolve({"--preset", "low_ram_safe"}, {{"DDO_PIN_CPU_MEMORY", "yes"},
                                                      {"DDO_PIN_CPU_WORKERS", "8"}});
  EXPECT_TRUE(pinned->pin_cpu_memory) << "the environment beats the preset";
  EXPECT_EQ(pinned->pin_workers, 8);
}

TEST(DaemonOptionsTest, FileTierThreadsAndStaging) {
  EXPECT_EQ(Resolve({})->file_read_threads, 0) << "0: ddod picks from the CPUs";
  EXPECT_EQ(Resolve({})->file_staging_buffers, 4);
  auto set = Resolve({}, {{"DDO_FILE_READ_THREADS", "8"}, {"DDO_FILE_STAGING_BUFFERS", "6"}});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->file_read_threads, 8);
  EXPECT_EQ(set->file_staging_buffers, 6);
  EXPECT_THAT(ErrorOf({}, {{"DDO_FILE_STAGING_BUFFERS", "1"}}), HasSubstr("from 2 to 32"));
  EXPECT_THAT(ErrorOf({}, {{"DDO_FILE_STAGING_BUFFERS", "33"}}), HasSubstr("DDO_FILE_STAGING_BUFFERS"));
  EXPECT_THAT(ErrorOf({}, {{"DDO_FILE_READ_THREADS", "0"}}), HasSubstr("DDO_FILE_READ_THREADS"));
}

TEST(DaemonOptionsTest, HostDevices) {
  EXPECT_EQ(Resolve({})->host_devices, 1);
  EXPECT_EQ(Resolve({"--host-devices", "2"})->host_devices, 2);
  EXPECT_EQ(Resolve({}, {{"DDO_HOST_DEVICES", "3"}})->host_devices, 3);
  EXPECT_THAT(ErrorOf({"--host-devices", "0"}), HasSubstr("from 1 to 64"));
}

TEST(DaemonOptionsTest, PerUserLimits) {
  auto defaults = Resolve({});
  EXPECT_EQ(defaults->max_leases_per_user, 32);
  EXPECT_EQ(defaults->max_uploads_per_user, 8);
  EXPECT_EQ(defaults->max_sessions_per_user, 256);
  EXPECT_FALSE(defaults->max_user_pool_gb.has_value());
  auto set = Resolve({"--max-leases-per-user", "4", "--max-uploads-per-user=2",
                      "--max-user-pool-gb", "12.5"},
                     {{"DDO_MAX_SESSIONS_PER_USER", "16"}});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->max_leases_per_user, 4);
  EXPECT_EQ(set->max_uploads_per_user, 2);
  EXPECT_EQ(set->max_sessions_per_user, 16);
  EXPECT_DOUBLE_EQ(*set->max_user_pool_gb, 12.5);
  EXPECT_THAT(ErrorOf({"--max-leases-per-user", "1000"}), HasSubstr("from 1 to 384"));
  EXPECT_THAT(ErrorOf({"--max-uploads-per-user", "0"}), HasSubstr("from 1 to 1024"));
}

TEST(DaemonOptionsTest, ConnectionLimitsAndTheDescriptorReserve) {
  auto defaults = Resolve({});
  EXPECT_EQ(defaults->max_connections_per_user, 64);
  EXPECT_EQ(defaults->max_connections, 1024);
  EXPECT_EQ(defaults->descriptor_reserve, 256);
  auto set = Resolve({"--max-connections-per-user", "8", "--max-connections=100"},
                     {{"DDO_DESCRIPTOR_RESERVE", "64"}});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->max_connections_per_user, 8);
  EXPECT_EQ(set->max_connections, 100);
  EXPECT_EQ(set->descriptor_reserve, 64);
  EXPECT_THAT(ErrorOf({"--max-connections-per-user", "0"}), HasSubstr("from 1 to 65536"));
  EXPECT_THAT(ErrorOf({"--max-connections", "-3"}), HasSubstr("from 1 to"));
}

TEST(DaemonOptionsTest, PresetWithoutHeadroomKeepsTheBuiltInDefault) {
  auto options = Resolve({"--preset", "warm_process"});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->preset->name, "warm_process");
  EXPECT_DOUBLE_EQ(options->system_ram_headroom_gb, 6);
}

TEST(DaemonOptionsTest, FlagsInBothSpellings) {
  auto options = Resolve({"--socket=/tmp/d/x.sock", "--listen", "127.0.0.1:7000",
                          "--ram-budget-gb", "12.5", "--vram-budget-gb=8", "--log-level",
                          "DEBUG", "--state-dir", "/srv/ddo", "--parent-pid", "4321",
                          "--socket-group", "video"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->socket_path, "/tmp/d/x.sock");
  EXPECT_EQ(options->listen_address, "127.0.0.1:7000");
  EXPECT_DOUBLE_EQ(*options->ram_budget_gb, 12.5);
  EXPECT_DOUBLE_EQ(*options->vram_budget_gb, 8);
  EXPECT_EQ(options->log_level, spdlog::level::debug);
  EXPECT_EQ(options->state_dir, "/srv/ddo");
  EXPECT_EQ(*options->parent_pid, 4321);
  EXPECT_EQ(options->socket_group, "video");
}

TEST(DaemonOptionsTest, PrecedenceFlagOverEnvironmentOverPresetOverDefault) {
  Environment env = {{"DDO_PRESET", "low_ram_safe"},
                     {"DDO_RAM_BUDGET_GB", "20"},
                     {"DDO_SYSTEM_RAM_HEADROOM_GB", "2"},
                     {"DDO_LOG_LEVEL", "warn"}};
  auto from_env = Resolve({}, env);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->preset->name, "low_ram_safe");
  EXPECT_DOUBLE_EQ(*from_env->ram_budget_gb, 20);
  EXPECT_DOUBLE_EQ(from_env->system_ram_headroom_gb, 2) << "environment beats preset";
  EXPECT_EQ(from_env->log_level, spdlog::level::warn);

  auto with_flags =
      Resolve({"--preset", "warm_process", "--ram-budget-gb", "30", "--log-level", "error"}, env);
  ASSERT_TRUE(with_flags.ok());
  EXPECT_EQ(with_flags->preset->name, "warm_process") << "flag beats DDO_PRESET";
  EXPECT_DOUBLE_EQ(*with_flags->ram_budget_gb, 30);
  EXPECT_EQ(with_flags->log_level, spdlog::level::err);

  auto preset_only = Resolve({"--preset", "one_shot_fast"});
  EXPECT_DOUBLE_EQ(preset_only->system_ram_headroom_gb, 8) << "preset beats default";
}

TEST(DaemonOptionsTest, EmptyEnvironmentValuesMeanUnset) {
  auto options = Resolve({}, {{"DDO_PRESET", ""}, {"DDO_RAM_BUDGET_GB", ""}});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->preset->name, "one_shot_fast");
  EXPECT_FALSE(options->ram_budget_gb.has_value());
}

TEST(DaemonOptionsTest, TheRamBudgetBoundsThePoolUnlessToldToCountTheRunners) {
  EXPECT_EQ(Resolve({})->ram_budget_scope, RamBudgetScope::kPool);
  EXPECT_EQ(Resolve({"--ram-budget-scope", "runners"})->ram_budget_scope,
            RamBudgetScope::kRunners);
  EXPECT_EQ(Resolve({}, {{"DDO_RAM_BUDGET_SCOPE", "Runners"}})->ram_budget_scope,
            RamBudgetScope::kRunners);
  EXPECT_EQ(Resolve({"--ram-budget-scope=pool"}, {{"DDO_RAM_BUDGET_SCOPE", "runners"}})
                ->ram_budget_scope,
            RamBudgetScope::kPool)
      << "the flag wins";
  const std::string error = ErrorOf({"--ram-budget-scope", "machine"});
  EXPECT_THAT(error, HasSubstr("'machine'"));
  EXPECT_THAT(error, HasSubstr("expected runners or pool"));
}

TEST(DaemonOptionsTest, InvalidValuesNameTheSettingTheValueAndTheChoices) {
  std::string error = ErrorOf({"--preset", "fastest"});
  EXPECT_THAT(error, HasSubstr("--preset"));
  EXPECT_THAT(error, HasSubstr("fastest"));
  EXPECT_THAT(error, HasSubstr("warm_process"));

  error = ErrorOf({}, {{"DDO_PRESET", "warm_server"}});
  EXPECT_THAT(error, HasSubstr("DDO_PRESET (environment)"));
  EXPECT_THAT(error, HasSubstr("warm_server"));

  error = ErrorOf({"--ram-budget-gb", "lots"});
  EXPECT_THAT(error, HasSubstr("--ram-budget-gb"));
  EXPECT_THAT(error, HasSubstr("lots"));

  error = ErrorOf({}, {{"DDO_VRAM_BUDGET_GB", "-3"}});
  EXPECT_THAT(error, HasSubstr("DDO_VRAM_BUDGET_GB"));

  error = ErrorOf({"--log-level", "loud"});
  EXPECT_THAT(error, HasSubstr("loud"));
  EXPECT_THAT(error, HasSubstr("debug"));

  EXPECT_THAT(ErrorOf({"--listen", "0.0.0.0:80"}), HasSubstr("loopback"));
  EXPECT_THAT(ErrorOf({"--listen", "127.0.0.1"}), HasSubstr("HOST:PORT"));
  EXPECT_THAT(ErrorOf({"--listen", "127.evil.example:5000"}), HasSubstr("loopback"));
  EXPECT_THAT(ErrorOf({"--socket", "relative.sock"}), HasSubstr("absolute"));
  EXPECT_THAT(ErrorOf({"--socket", "/" + std::string(200, 'x')}), HasSubstr("107"));
  EXPECT_THAT(ErrorOf({"--state-dir", "state"}), HasSubstr("absolute"));
  EXPECT_THAT(ErrorOf({"--parent-pid", "abc"}), HasSubstr("--parent-pid"));
  EXPECT_THAT(ErrorOf({"--bogus"}), HasSubstr("unknown argument '--bogus'"));
  EXPECT_THAT(ErrorOf({}, {{"DDO_PIN_CPU_WORKERS", "abc"}}), HasSubstr("whole number"));
  EXPECT_THAT(ErrorOf({"--socket"}), HasSubstr("--socket needs a value"));
}

TEST(DaemonOptionsTest, ListenAcceptsEveryLoopbackSpelling) {
  for (const char* address : {"127.0.0.1:1", "localhost:50051", "[::1]:9", "127.1.2.3:8"}) {
    EXPECT_TRUE(Resolve({"--listen", address}).ok()) << address;
  }
}

TEST(DaemonOptionsTest, HelpAndVersionShortCircuit) {
  auto help = Resolve({"--preset", "bogus", "--help"});
  ASSERT_TRUE(help.ok()) << "--help is answered even next to a bad value";
  EXPECT_TRUE(help->show_help);
  EXPECT_TRUE(Resolve({"--version"})->show_version);
  const std::string usage = DaemonUsage(TestUser());
  for (const char* flag : {"--preset", "--socket", "--listen", "--socket-group", "--log-level",
                           "--ram-budget-gb", "--vram-budget-gb", "--state-dir"}) {
    EXPECT_THAT(usage, HasSubstr(flag));
  }
  EXPECT_THAT(usage, HasSubstr("/run/user/1000/ddo/ddod.sock"));
}

TEST(DaemonOptionsTest, TheConfigFileLayersUnderTheEnvironment) {
  TempDirForTest dir;
  const std::string path = dir.path() + "/ddod.conf";
  std::ofstream(path) << "DDO_LOG_LEVEL=debug\nDDO_RAM_BUDGET_GB=3\nDDO_STREAM_UNIT=block\n";
  UserContext user;
  user.uid = 1000;
  user.home = dir.path();
  auto options = ResolveDaemonOptions({"--config", path}, {{"DDO_RAM_BUDGET_GB", "5"}}, user);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->log_level, spdlog::level::debug);
  EXPECT_EQ(options->ram_budget_gb, 5.0);  // the environment wins over the file
  EXPECT_EQ(options->setting_environment.at("DDO_STREAM_UNIT"), "block");
  EXPECT_EQ(options->config_path, path);
  EXPECT_TRUE(IsDaemonVariable("DDO_PRESET"));
  EXPECT_TRUE(IsDaemonVariable("DDO_FUSED_LORA"));
  EXPECT_FALSE(IsDaemonVariable("DDO_NOT_A_THING"));

  std::ofstream(path) << "DDO_LOG_LEVEL=loud\n";
  options = ResolveDaemonOptions({"--config", path}, {}, user);
  ASSERT_FALSE(options.ok());
  EXPECT_THAT(options.status().message(), HasSubstr("DDO_LOG_LEVEL (" + path + ")"));
}

}  // namespace
}  // namespace ddo
