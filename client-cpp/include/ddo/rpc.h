// File: client-cpp/include/ddo/rpc.h
//
// ddo::RpcClient: a C++ process's connection to ddod, without torch. Connect() does what the
// Python client's DdoClient.connect does (docs/protocol.md, "Finding the daemon"): it reads
// DDO_DAEMON (or ConnectOptions::address), tries the default sockets, refuses sockets and
// daemons of users it does not trust, proves who it is on ddod's identity socket, opens the
// lease, and may start a private ddod. Every call then carries the identity token.
//
// Calls return ddo::Status / ddo::StatusOr (status.h) with ddod's own message; nothing here
// needs gRPC, protobuf or absl to include.
//
// Thread-safety: an RpcClient may be used from several threads at once. The lease is read on a
// background thread; destroying the client ends the lease (ddod then releases every session it
// owns), closes the identity connection and stops a private ddod.
#ifndef DDO_CLIENT_RPC_H_
#define DDO_CLIENT_RPC_H_

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddo/export.h"
#include "ddo/status.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

struct ConnectOptions {
  // Any form DDO_DAEMON takes ("auto", "embedded", "unix:/abs", "/abs", "host:port"); ""
  // reads DDO_DAEMON (Python's address=None). A plain string: GCC 12 warns falsely
  // (-Wmaybe-uninitialized) on copies of a std::optional<std::string> member.
  std::string address;
  // The deadline of every call, and of waiting for the lease.
  double timeout_seconds = 5.0;
  // Whether a private ddod may start when no daemon answers. nullopt: yes unless the address
  // is fixed. false: never. true: also when a fixed address does not answer.
  std::optional<bool> allow_embedded;
  // How the client introduces itself in the lease (ddoctl sessions shows it).
  std::string client_name = "ddo client-cpp";
};

// Numbered as ddo.v1.DType.
enum class DType : int {
  kUnspecified = 0, kF64 = 1, kF32 = 2, kF16 = 3, kBF16 = 4, kF8E4M3 = 5, kF8E5M2 = 6,
  kI64 = 7, kI32 = 8, kI16 = 9, kI8 = 10, kU8 = 11, kBool = 12, kU16 = 13, kU32 = 14, kU64 = 15,
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::kUnspecified;
  std::vector<int64_t> shape;
  uint64_t byte_size = 0;
  std::string module_path;   // optional: the owning module, for planning
  std::string module_class;  // optional: e.g. "Linear"
  uint32_t unit = 0;
  bool is_buffer = false;
};

struct Segment {
  std::string shm_name;
  uint64_t size_bytes = 0;
  // A component's backing file (ddod's file tier, SEGMENT_KIND_FILE): no /dev/shm file; opened
  // only through ddod (open_backing_file), read-only, its placements at file offsets.
  bool backing_file = false;
};

// Where a tensor's bytes are: `segment` indexes the segments of the same answer.
struct Placement {
  std::string name;
  uint32_t segment = 0;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

struct ComponentInfo {
  std::string component_id;
  std::string cache_key;
  std::string structure_hash;
  std::string content_hash;
  uint64_t total_bytes = 0;
  bool ready = false;  // false while an upload is in progress
  uint32_t tensor_count = 0;
  uint32_t unit_count = 0;
  bool pinned = false;
  uint64_t pinned_bytes = 0;
  uint32_t sessions = 0;
  int64_t last_used_unix_ms = 0;
  std::string base_cache_key;
  uint64_t own_bytes = 0;
  int64_t keep_alive_seconds = 0;
  uint32_t owner_uid = 0;
  // With the layout only (attach, component(key, true)).
  std::vector<Segment> segments;
  std::vector<Placement> placements;
  std::vector<TensorSpec> tensors;
};

struct DeviceInfo {
  std::string uuid;
  int32_t ordinal = 0;
  std::string name;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  std::string compute_capability;
  uint64_t vram_budget_bytes = 0;
};

struct DaemonInfo {
  std::string version;
  std::string api_version;
  int64_t pid = 0;
  std::string backend;  // "host" or "cuda"
  std::string backend_detail;
  std::vector<DeviceInfo> devices;
  std::string requested_preset;
  std::string effective_preset;
  uint64_t ram_budget_bytes = 0;
  std::vector<std::string> listen_addresses;
  std::string state_dir;
  bool embedded = false;
  int64_t parent_pid = 0;
  std::string identity_socket;
  int64_t uid = 0;
};

// A CUDA IPC handle (cudaIpcMemHandle_t / cudaIpcEventHandle_t), 64 bytes.
using IpcHandle = std::array<uint8_t, 64>;

struct UnitLayout {
  uint32_t unit = 0;
  uint64_t byte_size = 0;
  bool resident = false;
  std::vector<Placement> tensors;  // offsets inside a ring slot, or inside the resident slab
  std::string name;
};

// A streaming session's device resources (sessions.proto DeviceResources): what the ring
// consumer maps. Handles are empty (all zero, has_* false) on the host backend.
struct DeviceResources {
  std::string device_uuid;
  bool has_resident_slab_handle = false;
  IpcHandle resident_slab_handle{};
  uint64_t resident_slab_bytes = 0;
  std::vector<Placement> resident;
  bool has_ring_handle = false;
  IpcHandle ring_handle{};
  uint32_t ring_slots = 0;
  uint64_t ring_slot_bytes = 0;
  uint64_t ring_arena_bytes = 0;
  std::vector<IpcHandle> ready_event_handles;     // K+1
  std::vector<IpcHandle> consumed_event_handles;  // K+1
  std::string control_block_shm;
  uint64_t control_block_bytes = 0;
  std::string doorbell_shm;
  std::string resident_slab_shm;  // host backend
  std::string ring_shm;           // host backend; map ring_arena_bytes + ring_slot_bytes
  std::vector<UnitLayout> units;
  int64_t daemon_pid = 0;
};

struct PlanDecision {
  std::string key;
  std::string value;
  std::string reason;
};

struct PlanExplanation {
  std::string route;
  std::vector<PlanDecision> decisions;
  uint64_t resident_bytes = 0;
  uint64_t streamed_bytes = 0;
  uint32_t ring_slots = 0;
  std::map<std::string, std::string> group_offload_args;
};

struct AttachAnswer {
  std::string session_id;
  ComponentInfo component;  // with its layout
  std::optional<DeviceResources> device;  // a streaming attach only
  PlanExplanation plan;
  std::vector<uint32_t> schedule;  // empty: the first forward learns it
};

// RegisterComponent's answer. A warm hit is stored already: nothing to upload or commit.
struct Upload {
  bool warm_hit = false;
  std::string upload_id;
  ComponentInfo component;  // its ref fields
  std::vector<Segment> segments;
  std::vector<Placement> placements;
};

// Bytes of one tensor, C-contiguous, little-endian, as in the TensorSpec.
struct TensorBytes {
  const void* data = nullptr;
  size_t size = 0;
};

struct LoadOptions {
  std::map<std::string, uint32_t> units;  // module path prefix -> unit; empty: one per tensor
  std::string content_hash;
  int64_t keep_alive_seconds = 0;
  // Give up when ddod sends no progress for this long; 0: max(60 s, 12 x the call timeout).
  double stall_timeout_seconds = 0;
};

struct LoadResult {
  ComponentInfo component;
  bool warm_hit = false;
  double seconds = 0;
};

struct SettingValue {
  std::string name;
  std::string value;
  std::string source;  // "default", "preset", "environment", "request", ...
};

struct ResolvedSettings {
  std::string requested_preset;
  std::string effective_preset;
  std::vector<SettingValue> values;
  std::map<std::string, std::vector<SettingValue>> components;
};

class DDO_CLIENT_API RpcClient {
 public:
  // UNAVAILABLE listing every address tried when no daemon answers (and none may start);
  // PERMISSION_DENIED for a socket, directory, port or process of an untrusted user;
  // INVALID_ARGUMENT for an invalid address; FAILED_PRECONDITION when a private ddod cannot
  // start (its log's end quoted).
  static StatusOr<RpcClient> Connect(const ConnectOptions& options = ConnectOptions());

  // A moved-from client may only be destroyed or assigned to.
  RpcClient(RpcClient&&) noexcept;
  RpcClient& operator=(RpcClient&&) noexcept;
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;
  ~RpcClient();  // ends the lease, then stops a private ddod

  // The gRPC target in use, e.g. "unix:/run/user/1000/ddo/ddod.sock".
  const std::string& target() const;
  const std::string& lease_id() const;
  // The uid ddod runs as, from the kernel (the process that answered HELLO).
  uid_t daemon_uid() const;
  // A private ddod's pid, or 0 when the daemon is shared.
  pid_t embedded_pid() const;
  // True once ddod announced on the lease stream that it is shutting down.
  bool daemon_shutting_down() const;
  // Why the lease ended without this client ending it; "" while it is held.
  std::string lease_lost_reason() const;

  StatusOr<DaemonInfo> info();
  // "SERVING", "NOT_SERVING", ... for `service` ("" is the daemon).
  StatusOr<std::string> health(const std::string& service = "");

  StatusOr<std::vector<ComponentInfo>> components();
  // NOT_FOUND with ddod's text when no READY component has `cache_key`.
  StatusOr<ComponentInfo> component(const std::string& cache_key, bool with_layout = false);
  // The bytes freed.
  StatusOr<uint64_t> evict(const std::string& cache_key);

  // Upload: register_component, then write_upload (or open_segment and write yourself), then
  // commit; abort gives the segments back. register_component (ddod reserves the memory) and
  // commit (ddod verifies and pins) have no fixed deadline: their work grows with the
  // component, and they give up with DEADLINE_EXCEEDED only when ddod sends no progress for
  // the larger of 60 s and 12 timeouts.
  StatusOr<Upload> register_component(const std::string& cache_key,
                                      const std::vector<TensorSpec>& tensors,
                                      const std::string& content_hash = "");
  // Writes every placed tensor's bytes into its segment (OPEN rw on the identity socket).
  // INVALID_ARGUMENT when a tensor is missing or its size differs from its placement.
  Status write_upload(const Upload& upload, const std::map<std::string, TensorBytes>& tensors);
  StatusOr<ComponentInfo> commit(const std::string& upload_id);
  StatusOr<uint64_t> abort(const std::string& upload_id);

  // ddod reads the safetensors files itself: each is opened here and passed over the identity
  // socket (FILE), so ddod reads only what this process may read.
  StatusOr<LoadResult> load_safetensors(const std::string& cache_key,
                                        const std::vector<std::string>& paths,
                                        const LoadOptions& options = LoadOptions());

  // device_uuid "": a host attach (map component().segments copy-on-write). Otherwise a
  // streaming session: "cpu", "cpu:N", "GPU-<uuid>" or "cuda:N", with `streamable` the names of
  // the tensors ddod may stream (Linear weights).
  StatusOr<AttachAnswer> attach(const std::string& cache_key, const std::string& device_uuid = "",
                                const std::map<std::string, std::string>& settings = {},
                                const std::vector<std::string>& streamable = {});
  Status detach(const std::string& session_id);
  // The uses per cycle ddod accepted.
  StatusOr<uint32_t> set_schedule(const std::string& session_id,
                                  const std::vector<uint32_t>& unit_order);

  StatusOr<ResolvedSettings> resolve_settings(
      const std::string& preset, const std::map<std::string, std::string>& environment = {},
      const std::map<std::string, std::string>& overrides = {},
      const std::vector<std::string>& components = {});
  StatusOr<PlanExplanation> explain_plan(const std::vector<TensorSpec>& tensors,
                                         const std::string& device_uuid = "",
                                         const std::map<std::string, std::string>& settings = {},
                                         const std::string& component = "");

  // A descriptor of ddod's segment `shm_name`: opened by name when ddod runs as this user (the
  // owner checked), else by ddod on the identity socket (OPEN; only segments granted to this
  // client's earlier calls).
  StatusOr<UniqueFd> open_segment(const std::string& shm_name, bool writable);
  // A read-only descriptor of a component's backing file (a Segment with backing_file), always
  // from ddod (OPEN on the identity socket): such a segment has no file to open by name.
  StatusOr<UniqueFd> open_backing_file(const std::string& shm_name);

  struct Impl;

 private:
  explicit RpcClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddo

#endif  // DDO_CLIENT_RPC_H_
