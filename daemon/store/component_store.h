// File: daemon/store/component_store.h
//
// The component store, ddod's warm cache: model components (tensor tables and their bytes)
// by cache key, each in its own pool segment. Bytes arrive by upload (the client writes into
// the segment, then commits) or by ddod reading safetensors files itself. Nothing is served
// before it is complete and verified. A component held by a session is never evicted; the
// others go least-recently-used first when a new one needs room. The manifest is rewritten
// after every change, so a ddod started after a crash adopts what this one had (AdoptPrevious).
//
// Thread-safety: all methods may be called from any thread. mu_ guards the maps; slow work
// (allocating, reading files, hashing, pinning) runs outside it, on components marked
// UPLOADING so that nobody else can use or replace them meanwhile.
#ifndef DDO_DAEMON_STORE_COMPONENT_STORE_H_
#define DDO_DAEMON_STORE_COMPONENT_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/pool/host_pool.h"
#include "daemon/session/lease_registry.h"
#include "daemon/store/tensor_table.h"

namespace ddo {

enum class ComponentState { kUploading, kReady };

// A consistent copy of one component's state, for answers and listings.
struct ComponentSnapshot {
  std::string component_id;
  std::string cache_key;
  std::string structure_hash;
  std::string content_hash;
  ComponentState state = ComponentState::kUploading;
  uint64_t total_bytes = 0;
  uint32_t unit_count = 0;
  std::string segment_name;
  uint64_t segment_size = 0;
  bool pinned = false;
  uint32_t sessions = 0;
  absl::Time last_used;
  int64_t uploader_pid = 0;
  std::vector<TensorEntry> tensors;
};

struct RegisterResult {
  ComponentSnapshot component;
  bool warm_hit = false;
  std::string upload_id;  // empty on a warm hit
};

struct SafetensorsRequest {
  std::string cache_key;
  std::vector<std::string> inputs;  // files or model folders, absolute
  std::string index_file;
  std::string content_hash;
  std::map<std::string, uint32_t> units;  // empty: one unit per tensor
};

struct LoadResult {
  ComponentSnapshot component;
  bool warm_hit = false;
  double seconds = 0;
};

struct HostAttachment {
  std::string session_id;
  ComponentSnapshot component;
  // The component's bytes; valid while the session holds the component.
  std::shared_ptr<PoolSegment> segment;
};

struct SessionSnapshot {
  std::string session_id;
  std::string lease_id;
  std::string cache_key;
};

struct StoreStats {
  uint32_t components = 0;  // READY
  uint64_t used_bytes = 0;  // tensor bytes of READY components
  uint32_t sessions = 0;
  uint64_t evictions = 0;
  uint32_t adopted = 0;
};

struct StoreOptions {
  // Where the pool manifest lives ("<state dir>/pool-<namespace>/manifest.json").
  std::string manifest_path;
  // Threads that read safetensors files.
  int read_threads = 4;
};

class ComponentStore {
 public:
  ComponentStore(HostPool& pool, StoreOptions options);
  ComponentStore(const ComponentStore&) = delete;
  ComponentStore& operator=(const ComponentStore&) = delete;
  ~ComponentStore();

  // Adopts the components a previous ddod of this pool left (manifest + segments), verifying
  // each; discards and logs whatever cannot be trusted, and removes leftover segments.
  void AdoptPrevious();

  // Registers a tensor table under `cache_key`: a warm hit when the key holds the same
  // structure (and content hash, when given); otherwise a new upload the lease owns.
  // ABORTED while another client uploads the key; FAILED_PRECONDITION when a different
  // component under the key is in use; RESOURCE_EXHAUSTED when no room can be made.
  absl::StatusOr<RegisterResult> Register(const Lease& lease, const std::string& cache_key,
                                          std::vector<TensorEntry> tensors,
                                          const std::string& content_hash);

  // Completes an upload: verifies the content hash when one was given, pins, publishes.
  absl::StatusOr<ComponentSnapshot> Commit(const std::string& lease_id,
                                           const std::string& upload_id);

  // Discards an upload; returns the bytes freed.
  absl::StatusOr<uint64_t> Abort(const std::string& lease_id, const std::string& upload_id);

  // Reads safetensors files straight into a new component (or finds it warm). `progress`
  // gets (bytes_done, bytes_total) from any thread; `cancelled` stops the read.
  absl::StatusOr<LoadResult> LoadSafetensors(
      const Lease& lease, const SafetensorsRequest& request,
      const std::function<void(uint64_t, uint64_t)>& progress,
      const std::function<bool()>& cancelled);

  // READY components only.
  absl::StatusOr<ComponentSnapshot> Get(const std::string& cache_key) const;
  std::vector<ComponentSnapshot> List() const;

  // Removes an unused component; returns the bytes freed.
  absl::StatusOr<uint64_t> Evict(const std::string& cache_key);

  // A host session: the component stays until Detach or the lease ends.
  absl::StatusOr<HostAttachment> AttachHost(const Lease& lease, const std::string& cache_key);
  absl::Status Detach(const std::string& session_id);

  // Everything a lease owned: uploads discarded, sessions detached.
  void ReleaseLease(const std::string& lease_id);

  StoreStats Stats() const;
  std::vector<SessionSnapshot> Sessions() const;

  // At shutdown: with `discard`, every segment and the manifest are removed; otherwise
  // READY components stay in /dev/shm for the next ddod, unfinished uploads are removed.
  void Close(bool discard);

 private:
  struct Component {
    ComponentSnapshot info;  // info.sessions and info.last_used are live here
    std::shared_ptr<PoolSegment> segment;
    std::string upload_id;
    std::string owner_lease;  // while uploading
  };
  struct Session {
    std::string lease_id;
    std::string cache_key;
  };

  // Steps shared by Register and LoadSafetensors.
  absl::StatusOr<RegisterResult> BeginUpload(const Lease& lease, const std::string& cache_key,
                                             std::vector<TensorEntry> tensors,
                                             const std::string& content_hash);
  absl::StatusOr<std::shared_ptr<PoolSegment>> SegmentOfUpload(const std::string& lease_id,
                                                               const std::string& upload_id,
                                                               std::vector<TensorEntry>* tensors,
                                                               std::string* content_hash);
  // Evicts unused READY components, least recently used first, until `bytes` fit.
  absl::Status MakeRoomLocked(const std::string& for_key, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases a component; its segment leaves /dev/shm when the last user lets go.
  void DiscardLocked(std::map<std::string, Component>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, Component>::iterator FindUploadLocked(const std::string& upload_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rewrites the manifest with the READY components.
  void PersistLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ComponentSnapshot SnapshotLocked(const Component& component) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HostPool& pool_;
  const StoreOptions options_;

  mutable absl::Mutex mu_;
  std::map<std::string, Component> components_ ABSL_GUARDED_BY(mu_);  // by cache key
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);       // by session id
  uint64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t adopted_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// 16 hex digits naming a component: a hash of its key and structure.
std::string ComponentId(const std::string& cache_key, const std::string& structure_hash);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_COMPONENT_STORE_H_
