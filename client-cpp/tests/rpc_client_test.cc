// ddo::RpcClient against a real ddod (this build's, or DDO_DDOD_BINARY), started by the test on a
// socket in a private directory, as tests/python/conftest.py does.
#include "ddo/rpc.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client-cpp/tests/test_daemon.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "stall_watchdog.h"


namespace ddo {
namespace {

using ::testing::HasSubstr;

using test_support::DdodBinary;
using test_support::Ddod;
using test_support::TempDir;

// One ddod for the suite; each test gets its own XDG_RUNTIME_DIR and no DDO_DAEMON.
class RpcClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::unsetenv("DDO_DAEMON");
    suite_dir_ = new TempDir();
    ::chmod(suite_dir_->path().c_str(), 0700);
    daemon_ = new Ddod(*suite_dir_);
  }
  static void TearDownTestSuite() {
    delete daemon_;
    delete suite_dir_;
  }
  void SetUp() override {
    const std::string xdg = dir_.Join("xdg");
    ASSERT_EQ(::mkdir(xdg.c_str(), 0700), 0);
    ::setenv("XDG_RUNTIME_DIR", xdg.c_str(), 1);
  }

  static RpcClient Connect() {
    ConnectOptions options;
    options.address = daemon_->address();
    options.timeout_seconds = 10;
    StatusOr<RpcClient> client = RpcClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return std::move(client).value();
  }

  static TempDir* suite_dir_;
  static Ddod* daemon_;
  TempDir dir_;
};

TempDir* RpcClientTest::suite_dir_ = nullptr;
Ddod* RpcClientTest::daemon_ = nullptr;

std::vector<float> Ramp(size_t count, float start) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = start + static_cast<float>(i) * 0.25f;
  return values;
}

TensorSpec FloatSpec(const std::string& name, int64_t rows, int64_t columns) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = DType::kF32;
  spec.shape = {rows, columns};
  spec.byte_size = static_cast<uint64_t>(rows * columns) * sizeof(float);
  return spec;
}

// The bytes of `placement`, read through a private mapping of its segment (as a runner maps
// an attached component: MAP_PRIVATE, copy-on-write).
std::string ReadPlaced(RpcClient& client, const ComponentInfo& info, const Placement& placement) {
  const Segment& segment = info.segments.at(placement.segment);
  StatusOr<UniqueFd> fd = client.open_segment(segment.shm_name, false);
  EXPECT_TRUE(fd.ok()) << fd.status().ToString();
  if (!fd.ok()) return "";
  void* mapped = ::mmap(nullptr, segment.size_bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_NORESERVE, fd->get(), 0);
  EXPECT_NE(mapped, MAP_FAILED);
  if (mapped == MAP_FAILED) return "";
  std::string bytes(static_cast<const char*>(mapped) + placement.offset, placement.byte_size);
  ::munmap(mapped, segment.size_bytes);
  return bytes;
}

const Placement& PlacementOf(const ComponentInfo& info, const std::string& name) {
  for (const Placement& placement : info.placements) {
    if (placement.name == name) return placement;
  }
  ADD_FAILURE() << "no placement for " << name;
  static const Placement none;
  return none;
}

std::string BytesOf(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

TEST_F(RpcClientTest, AddressRulesAndUnansweredAddressesListEveryAttempt) {
  ConnectOptions invalid;
  invalid.address = "unix:relative";
  StatusOr<RpcClient> refused = RpcClient::Connect(invalid);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("DDO_DAEMON"));

  ConnectOptions fixed;
  fixed.address = dir_.Join("none.sock");  // fixed: no private ddod, no other candidate
  StatusOr<RpcClient> missing = RpcClient::Connect(fixed);
  ASSERT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("unix:" + dir_.Join("none.sock") + " (no socket file)"));

  ConnectOptions defaults;  // DDO_DAEMON unset: the user's socket, then the system's
  defaults.allow_embedded = false;
  StatusOr<RpcClient> none = RpcClient::Connect(defaults);
  if (none.ok()) GTEST_SKIP() << "a system ddod answers at /run/ddo/ddod.sock";
  ASSERT_EQ(none.status().code(), StatusCode::kUnavailable) << none.status().ToString();
  if (::geteuid() != 0) {  // root's own socket is the system's
    EXPECT_THAT(none.status().message(),
                HasSubstr("unix:" + dir_.Join("xdg/ddo/ddod.sock") + " (no socket file); "));
  }
  EXPECT_THAT(none.status().message(), HasSubstr("unix:/run/ddo/ddod.sock ("));

  ConnectOptions embedded;
  embedded.address = "embedded";
  embedded.allow_embedded = false;
  EXPECT_EQ(RpcClient::Connect(embedded).status().code(), StatusCode::kInvalidArgument);

  ConnectOptions tcp;  // a port nobody listens on: nothing answers
  tcp.address = "127.0.0.1:1";
  tcp.timeout_seconds = 1;
  EXPECT_EQ(RpcClient::Connect(tcp).status().code(), StatusCode::kUnavailable);
}

TEST_F(RpcClientTest, ASocketInADirectoryOthersMayWriteIsRefused) {
  const std::string open_dir = dir_.Join("open");
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  const std::string path = open_dir + "/ddod.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ::listen(fd, 1);
  ConnectOptions options;
  options.address = path;
  StatusOr<RpcClient> refused = RpcClient::Connect(options);
  ::close(fd);
  ASSERT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.status().message(), HasSubstr("writable by it only"));
}

TEST_F(RpcClientTest, ConnectsWithIdentityAndLease) {
  RpcClient client = Connect();
  EXPECT_EQ(client.target(), daemon_->address());
  EXPECT_FALSE(client.lease_id().empty());
  EXPECT_EQ(client.daemon_uid(), ::geteuid());
  EXPECT_EQ(client.embedded_pid(), 0);
  StatusOr<DaemonInfo> info = client.info();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_FALSE(info->version.empty());
  EXPECT_EQ(info->backend, "host");
  EXPECT_EQ(info->identity_socket, daemon_->address().substr(5) + ".id");
  EXPECT_EQ(client.health().value(), "SERVING");
  // These need the token: ddod refuses a call without it.
  EXPECT_TRUE(client.components().ok()) << client.components().status().ToString();
  StatusOr<ResolvedSettings> settings = client.resolve_settings("warm_process");
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_EQ(settings->effective_preset, "warm_process");
  EXPECT_FALSE(settings->values.empty());
  EXPECT_TRUE(client.daemon_shutting_down() == false && client.lease_lost_reason().empty());
}

// A loopback port nobody listens on now.
int FreeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

TEST_F(RpcClientTest, OverLoopbackTcpTheIdentitySocketComesFromGetInfo) {
  const std::string port = std::to_string(FreeTcpPort());
  TempDir dir;
  ::chmod(dir.path().c_str(), 0700);
  Ddod tcp_daemon(dir, {"--listen", "127.0.0.1:" + port});
  ConnectOptions options;
  options.address = "127.0.0.1:" + port;
  StatusOr<RpcClient> client = RpcClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();  // the port's owner is trusted
  EXPECT_EQ(client->target(), "127.0.0.1:" + port);
  EXPECT_FALSE(client->lease_id().empty());
  EXPECT_TRUE(client->components().ok());
}

TEST_F(RpcClientTest, UnknownKeyIsNotFoundInDdodsWords) {
  RpcClient client = Connect();
  StatusOr<ComponentInfo> missing = client.component("cpp/no-such-key");
  ASSERT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no component 'cpp/no-such-key' in the pool");
  EXPECT_EQ(client.attach("cpp/no-such-key").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client.evict("cpp/no-such-key").status().code(), StatusCode::kNotFound);
}

TEST_F(RpcClientTest, RegisterCommitAttachReadsTheSameBytesThenEvict) {
  RpcClient client = Connect();
  const std::vector<float> weight = Ramp(64 * 32, -3.0f);
  const std::vector<float> bias = Ramp(64, 7.0f);
  const std::vector<TensorSpec> specs = {FloatSpec("layer.weight", 64, 32),
                                         FloatSpec("layer.bias", 1, 64)};
  StatusOr<Upload> upload = client.register_component("cpp/roundtrip", specs);
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_FALSE(upload->warm_hit);
  EXPECT_EQ(client.write_upload(*upload, {{"layer.weight", {weight.data(), 1}}}).code(),
            StatusCode::kInvalidArgument);  // a size that differs from the placement
  ASSERT_TRUE(client
                  .write_upload(*upload, {{"layer.weight", {weight.data(), weight.size() * 4}},
                                          {"layer.bias", {bias.data(), bias.size() * 4}}})
                  .ok());
  StatusOr<ComponentInfo> committed = client.commit(upload->upload_id);
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_TRUE(committed->ready);
  EXPECT_EQ(committed->cache_key, "cpp/roundtrip");

  StatusOr<Upload> again = client.register_component("cpp/roundtrip", specs);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->warm_hit);

  StatusOr<AttachAnswer> attached = client.attach("cpp/roundtrip");
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  EXPECT_FALSE(attached->device.has_value());
  const ComponentInfo& info = attached->component;
  EXPECT_EQ(ReadPlaced(client, info, PlacementOf(info, "layer.weight")), BytesOf(weight));
  EXPECT_EQ(ReadPlaced(client, info, PlacementOf(info, "layer.bias")), BytesOf(bias));
  ASSERT_TRUE(client.detach(attached->session_id).ok());

  StatusOr<uint64_t> freed = client.evict("cpp/roundtrip");
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_GE(*freed, weight.size() * 4);
  EXPECT_EQ(client.component("cpp/roundtrip").status().code(), StatusCode::kNotFound);
}

// Attach may read the component back from its files and fill a slab before it answers: it is
// not bound by the client's timeout. ddod is held still (SIGSTOP) past that timeout while the
// call is in flight; the call waits for it.
TEST_F(RpcClientTest, AnAttachOutlastsTheClientsTimeout) {
  ConnectOptions options;
  options.address = daemon_->address();
  options.timeout_seconds = 2;
  StatusOr<RpcClient> client = RpcClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const std::vector<float> weight = Ramp(16, 1.0f);
  StatusOr<Upload> upload = client->register_component("cpp/slow-attach", {FloatSpec("w", 4, 4)});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_TRUE(client->write_upload(*upload, {{"w", {weight.data(), weight.size() * 4}}}).ok());
  ASSERT_TRUE(client->commit(upload->upload_id).ok());

  ASSERT_EQ(::kill(daemon_->pid(), SIGSTOP), 0);
  std::thread resume([pid = daemon_->pid()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
    ::kill(pid, SIGCONT);
  });
  StatusOr<AttachAnswer> attached = client->attach("cpp/slow-attach");
  resume.join();
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  EXPECT_TRUE(client->detach(attached->session_id).ok());
  EXPECT_TRUE(client->evict("cpp/slow-attach").ok());
}

TEST_F(RpcClientTest, AbortGivesTheUploadBack) {
  RpcClient client = Connect();
  StatusOr<Upload> upload = client.register_component("cpp/aborted", {FloatSpec("w", 8, 8)});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_TRUE(client.abort(upload->upload_id).ok());
  EXPECT_EQ(client.component("cpp/aborted").status().code(), StatusCode::kNotFound);
}

// A safetensors file: u64 header length, the JSON header (padded to 8), then the data.
void WriteSafetensors(const std::string& path, const std::vector<float>& values, int rows,
                      int columns) {
  std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(rows) + "," +
                       std::to_string(columns) + "],\"data_offsets\":[0," +
                       std::to_string(values.size() * 4) + "]}}";
  while (header.size() % 8 != 0) header += ' ';
  const uint64_t length = header.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&length), sizeof(length));
  out << header << BytesOf(values);
}

TEST_F(RpcClientTest, LoadSafetensorsPassesTheFileAndReadsItBack) {
  RpcClient client = Connect();
  const std::vector<float> values = Ramp(16 * 24, 0.5f);
  const std::string path = dir_.Join("model.safetensors");
  WriteSafetensors(path, values, 16, 24);
  StatusOr<LoadResult> loaded = client.load_safetensors("cpp/loaded", {path});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->component.ready);
  StatusOr<ComponentInfo> info = client.component("cpp/loaded", /*with_layout=*/true);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_EQ(info->tensors.size(), 1u);
  EXPECT_EQ(info->tensors[0].dtype, DType::kF32);
  EXPECT_EQ(info->tensors[0].shape, (std::vector<int64_t>{16, 24}));
  StatusOr<AttachAnswer> attached = client.attach("cpp/loaded");
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  EXPECT_EQ(ReadPlaced(client, attached->component, PlacementOf(attached->component, "w")),
            BytesOf(values));
  EXPECT_EQ(client.load_safetensors("cpp/x", {dir_.Join("absent")}).status().code(),
            StatusCode::kNotFound);
}

TEST_F(RpcClientTest, ThreadsShareOneClientAndItsIdentityConnection) {
  RpcClient client = Connect();
  constexpr int kThreads = 4;
  std::vector<std::string> paths;
  for (int i = 0; i < kThreads; ++i) {
    paths.push_back(dir_.Join("t" + std::to_string(i) + ".safetensors"));
    WriteSafetensors(paths.back(), Ramp(8 * 8, static_cast<float>(i)), 8, 8);
  }
  // Each load passes its file on the one identity socket (FILE): answers must pair with
  // requests while the threads interleave.
  std::vector<Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 5 && results[i].ok(); ++round) {
        const std::string key = "cpp/thread-" + std::to_string(i);
        StatusOr<LoadResult> loaded = client.load_safetensors(key, {paths[i]});
        results[i] = loaded.status();
        if (loaded.ok() && !client.components().ok()) {
          results[i] = Status(StatusCode::kInternal, "components failed");
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
    EXPECT_TRUE(client.evict("cpp/thread-" + std::to_string(i)).ok());
  }
}

TEST_F(RpcClientTest, TheClientLearnsThatDdodStops) {
  TempDir dir;
  ::chmod(dir.path().c_str(), 0700);
  auto own_daemon = std::make_unique<Ddod>(dir);
  ConnectOptions options;
  options.address = own_daemon->address();
  StatusOr<RpcClient> client = RpcClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ(client->lease_lost_reason(), "");
  own_daemon.reset();  // SIGTERM: ddod announces shutting_down, then ends the stream
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (client->lease_lost_reason().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(client->lease_lost_reason().empty());
  EXPECT_EQ(client->info().status().code(), StatusCode::kUnavailable);
}

TEST_F(RpcClientTest, TheLeaseEndsWithTheClient) {
  RpcClient keeper = Connect();
  const std::vector<float> weight = Ramp(32 * 32, 1.0f);
  StatusOr<Upload> upload = keeper.register_component("cpp/leased", {FloatSpec("w", 32, 32)});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_TRUE(keeper.write_upload(*upload, {{"w", {weight.data(), weight.size() * 4}}}).ok());
  ASSERT_TRUE(keeper.commit(upload->upload_id).ok());
  {
    RpcClient user = Connect();
    ASSERT_NE(user.lease_id(), keeper.lease_id());
    ASSERT_TRUE(user.attach("cpp/leased").ok());
    EXPECT_EQ(keeper.component("cpp/leased")->sessions, 1u);
  }  // the lease, and the session it owns, end here
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (keeper.component("cpp/leased")->sessions != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(keeper.component("cpp/leased")->sessions, 0u);
  EXPECT_TRUE(keeper.evict("cpp/leased").ok());
}

TEST_F(RpcClientTest, AStreamingAttachAnswersWhatTheConsumerMaps) {
  RpcClient client = Connect();
  TensorSpec spec = FloatSpec("blocks.0.proj.weight", 128, 64);
  spec.module_path = "blocks.0.proj";
  spec.module_class = "Linear";
  const std::vector<float> weight = Ramp(128 * 64, 2.0f);
  StatusOr<Upload> upload = client.register_component("cpp/streamed", {spec});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_TRUE(client.write_upload(*upload, {{spec.name, {weight.data(), weight.size() * 4}}})
                  .ok());
  ASSERT_TRUE(client.commit(upload->upload_id).ok());
  StatusOr<AttachAnswer> session = client.attach(
      "cpp/streamed", "cpu", {{"DDO_SMALL_TENSOR_THRESHOLD_KB", "0"}}, {spec.name});
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE(session->device.has_value());
  const DeviceResources& device = *session->device;
  EXPECT_EQ(device.device_uuid, "cpu");
  EXPECT_GE(device.ring_slots, 1u);
  EXPECT_FALSE(device.control_block_shm.empty());
  EXPECT_FALSE(device.doorbell_shm.empty());
  EXPECT_FALSE(device.ring_shm.empty());
  EXPECT_FALSE(device.has_ring_handle);  // the host backend has no CUDA handles
  EXPECT_GT(device.daemon_pid, 0);
  ASSERT_FALSE(device.units.empty());
  EXPECT_FALSE(session->plan.route.empty());
  // The control block is granted read-write, the ring read-only.
  EXPECT_TRUE(client.open_segment(device.control_block_shm, true).ok());
  EXPECT_TRUE(client.open_segment(device.ring_shm, false).ok());
  std::vector<uint32_t> order;
  for (const UnitLayout& unit : device.units) order.push_back(unit.unit);
  StatusOr<uint32_t> uses = client.set_schedule(session->session_id, order);
  ASSERT_TRUE(uses.ok()) << uses.status().ToString();
  EXPECT_EQ(*uses, order.size());
  ASSERT_TRUE(client.detach(session->session_id).ok());
  EXPECT_EQ(client.detach(session->session_id).code(), StatusCode::kNotFound);
}

TEST_F(RpcClientTest, ExplainPlanNeedsNoUpload) {
  RpcClient client = Connect();
  TensorSpec spec = FloatSpec("proj.weight", 256, 256);
  spec.module_path = "proj";
  spec.module_class = "Linear";
  StatusOr<PlanExplanation> plan = client.explain_plan({spec}, "cpu");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_FALSE(plan->route.empty());
  EXPECT_FALSE(plan->decisions.empty());
}

TEST_F(RpcClientTest, EmbeddedDaemonStartsAndStopsWithTheClient) {
  ::setenv("DDO_DDOD_BINARY", DdodBinary().c_str(), 1);
  ::setenv("DDO_STATE_DIR", dir_.Join("embedded-state").c_str(), 1);
  ::setenv("DDO_PRESET", "warm_process", 1);  // a per-call setting: not passed to ddod
  ConnectOptions options;
  options.address = "embedded";
  options.timeout_seconds = 10;
  pid_t pid = 0;
  std::string socket_dir;
  {
    StatusOr<RpcClient> client = RpcClient::Connect(options);
    ::unsetenv("DDO_PRESET");
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    pid = client->embedded_pid();
    ASSERT_GT(pid, 0);
    StatusOr<DaemonInfo> info = client->info();
    ASSERT_TRUE(info.ok());
    EXPECT_TRUE(info->embedded);
    EXPECT_EQ(info->parent_pid, ::getpid());
    EXPECT_EQ(info->pid, pid);
    EXPECT_NE(info->requested_preset, "warm_process");
    EXPECT_THAT(client->target(), HasSubstr("/ddo-embedded-"));
    EXPECT_EQ(::kill(pid, 0), 0);
    socket_dir = client->target().substr(5, client->target().rfind('/') - 5);
    struct stat found {};
    ASSERT_EQ(::lstat(socket_dir.c_str(), &found), 0);
    EXPECT_EQ(found.st_mode & 07777, 0700u);
    EXPECT_NE(::lstat((socket_dir + "/ddod.log").c_str(), &found), 0);  // unlinked once serving
  }
  EXPECT_NE(::kill(pid, 0), 0);  // stopped and reaped
  struct stat gone {};
  EXPECT_NE(::lstat(socket_dir.c_str(), &gone), 0);  // its directory removed
  ::unsetenv("DDO_STATE_DIR");
}

TEST_F(RpcClientTest, EmbeddedStartFailureQuotesTheReason) {
  ::setenv("DDO_DDOD_BINARY", dir_.Join("not-there").c_str(), 1);
  ConnectOptions options;
  options.address = "embedded";
  StatusOr<RpcClient> client = RpcClient::Connect(options);
  ::unsetenv("DDO_DDOD_BINARY");
  ASSERT_EQ(client.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(client.status().message(), HasSubstr("is not an executable file"));
}

TEST(StallWatchdogTest, FiresOnlyWithoutProgress) {
  std::atomic<int> stalls{0};
  {
    StallWatchdog watchdog(0.1, [&] { ++stalls; });
    for (int i = 0; i < 20; ++i) {  // 0.2 s of progress every 10 ms
      watchdog.Progress();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(watchdog.fired());
  }
  EXPECT_EQ(stalls.load(), 0);
  StallWatchdog silent(0.05, [&] { ++stalls; });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(silent.fired());
  EXPECT_EQ(stalls.load(), 1);
}

}  // namespace
}  // namespace ddo
