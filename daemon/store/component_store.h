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
#include <optional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/identity/caller.h"
#include "daemon/pool/host_pool.h"
#include "daemon/session/lease_registry.h"
#include "daemon/store/file_identity.h"
#include "daemon/store/safetensors.h"
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
  uid_t owner_uid = 0;  // who made it: only they (or an admin) evict or replace it
  std::vector<TensorEntry> tensors;
};


struct RegisterResult {
  ComponentSnapshot component;
  bool warm_hit = false;
  std::string upload_id;  // empty on a warm hit
};

struct SafetensorsRequest {
  std::string cache_key;
  std::vector<SafetensorsSource> files;     // open descriptors; read only through them
  std::optional<SafetensorsSource> index;   // a *.safetensors.index.json, when there is one
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
  uid_t uid = 0;
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
  // Per uid (admins excepted): uploads in progress, host sessions, and pool bytes of the
  // components it owns; 0 bytes: the pool budget is the only bound.
  size_t max_uploads_per_uid = 8;
  size_t max_sessions_per_uid = 256;
  uint64_t max_bytes_per_uid = 0;
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
  // structure (and content hash, when given) and the lease's caller may read it; otherwise a
  // new upload the lease owns. ABORTED while another client uploads the key;
  // FAILED_PRECONDITION when a different component under the key is in use;
  // PERMISSION_DENIED when the key holds another user's component; RESOURCE_EXHAUSTED when no
  // room can be made or the caller's uid is at a limit (named).
  absl::StatusOr<RegisterResult> Register(const Lease& lease, const std::string& cache_key,
                                          std::vector<TensorEntry> tensors,
                                          const std::string& content_hash);

  // Completes an upload: verifies the content hash when one was given, pins, publishes.
  absl::StatusOr<ComponentSnapshot> Commit(const std::string& lease_id,
                                           const std::string& upload_id);

  // Discards an upload; returns the bytes freed.
  absl::StatusOr<uint64_t> Abort(const std::string& lease_id, const std::string& upload_id);

  // Reads safetensors files straight into a new component (or finds it warm), through the
  // request's descriptors (validated first; see safetensors.h). `progress` gets
  // (bytes_done, bytes_total) from any thread; `cancelled` stops the validation and the read.
  absl::StatusOr<LoadResult> LoadSafetensors(
      const Lease& lease, SafetensorsRequest request,
      const std::function<void(uint64_t, uint64_t)>& progress,
      const std::function<bool()>& cancelled);

  // READY components `caller` may read (its own, proved, or any for an admin). Another
  // user's component is NOT_FOUND, as if it were not there.
  absl::StatusOr<ComponentSnapshot> Get(const std::string& cache_key, const Caller& caller) const;
  std::vector<ComponentSnapshot> List(const Caller& caller) const;
  // Whether `caller` may read the component under `cache_key` (false when there is none; an
  // admin may read everything).
  bool MayRead(const std::string& cache_key, const Caller& caller) const;

  // Undoes a commit whose caller was told it failed (its lease ended meanwhile): removes the
  // component under `cache_key` if it still lives in `segment_name` and no session uses it.
  void DiscardUnused(const std::string& cache_key, const std::string& segment_name);

  // Removes an unused component; returns the bytes freed. Only its owner or an admin may.
  absl::StatusOr<uint64_t> Evict(const std::string& cache_key, const Caller& caller);

  // A host session: the component stays until Detach or the lease ends. The lease's caller
  // must be allowed to read the component.
  absl::StatusOr<HostAttachment> AttachHost(const Lease& lease, const std::string& cache_key);
  // PERMISSION_DENIED unless `caller` runs as the session's uid or is an admin.
  absl::Status Detach(const std::string& session_id, const Caller& caller);
  // OK when the session exists and `caller` runs as its uid or is an admin; NOT_FOUND or
  // PERMISSION_DENIED otherwise. Streaming sessions are host sessions too, by the same id.
  absl::Status CheckSessionOwner(const std::string& session_id, const Caller& caller) const;

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
    std::set<uid_t> readers;  // other uids that proved they may read it
    std::vector<FileIdentity> sources;  // the files it was read from; empty for uploads
  };
  struct Session {
    std::string lease_id;
    std::string cache_key;
    uid_t uid = 0;
  };

  static bool MayRead(const Caller& caller, const Component& component);
  // Another user's READY component under `cache_key` with this structure, that `caller` may
  // not read yet and whose files are not `sources`: what a caller must prove it holds the bytes
  // of (by its files' content hash) to share it. Nothing when there is none.
  struct ProofTarget {
    std::shared_ptr<PoolSegment> segment;  // keeps the bytes while they are hashed
    std::vector<TensorEntry> tensors;      // with offsets
    std::string content_hash;              // "" until someone computed it
  };
  std::optional<ProofTarget> FindProofTarget(const std::string& cache_key, const Caller& caller,
                                             const std::string& structure_hash,
                                             const std::vector<FileIdentity>& sources) const;
  // Makes `caller` a reader of the component in `segment_name` (still under `cache_key`) and
  // remembers its content hash; NOT_FOUND when it was replaced or evicted meanwhile.
  absl::StatusOr<ComponentSnapshot> AddReader(const std::string& cache_key, const Caller& caller,
                                              const std::string& segment_name,
                                              const std::string& content_hash);
  // NOT_FOUND or PERMISSION_DENIED unless the session exists and is `caller`'s (or an admin's).
  absl::Status SessionOwnedLocked(const std::string& session_id, const Caller& caller) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED naming the limit when `caller` (not an admin) may not start an upload
  // of `bytes` more.
  absl::Status CheckUploadLimitsLocked(const Caller& caller, uint64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Steps shared by Register and LoadSafetensors. `sources` (LoadSafetensors only) are the
  // identities of the caller's files: when they are a READY component's own sources, the
  // caller proved it may read it and becomes one of its readers.
  absl::StatusOr<RegisterResult> BeginUpload(const Lease& lease, const std::string& cache_key,
                                             std::vector<TensorEntry> tensors,
                                             const std::string& content_hash,
                                             const std::vector<FileIdentity>& sources = {});
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
