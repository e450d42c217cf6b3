// File: daemon/store/component_store.h
//
// The component store, ddod's warm cache: model components (tensor tables and their bytes)
// by owner uid and cache key, each in its own pool segment. A key is a name inside its uid:
// two users' "flux/transformer" are two entries, and no caller (an admin neither) reads,
// attaches or hits another uid's entry. Two users loading the same bytes from files share
// one copy: the second one's entry uses the first's segments (refcounted, like a derived
// version's) once ddod proved by SHA-256 that its files hold the same bytes. Bytes arrive by upload (the client writes into
// the segment, then commits) or by ddod reading safetensors files itself. A derived version
// (RegisterDerived) stores only its changed tensors in a segment of its own and shares the
// others' segments with its base: segments are refcounted, so a base may go while a derived
// version still uses its bytes. Nothing is served before it is complete and verified. A
// component held by a session is never evicted; the others go least-recently-used first when
// a new one needs room. The manifest is rewritten
// after every change, so a ddod started after a crash adopts what this one had (AdoptPrevious).
//
// The store owns mu_ and the table; its concerns live in files of their own, each defining
// ComponentStore members: component_store.cc (uploads, commits, loads, sessions, limits),
// component_store_derived.cc (RegisterDerived), component_store_sharing.cc (the sharing
// proof), component_store_eviction.cc (making room, Evict, keep-alives),
// component_store_file_tier.cc (loads kept in their files), component_store_tiering.cc
// (demotion to the files and promotion back) and component_store_adoption.cc (AdoptPrevious).
//
// Thread-safety: all methods may be called from any thread. mu_ guards the maps; slow work
// (allocating, reading files, hashing, pinning) runs outside it, on components marked
// UPLOADING so that nobody else can use or replace them meanwhile. The ...Locked members
// are called with mu_ held (Abseil's annotations say so).
#ifndef DDO_DAEMON_STORE_COMPONENT_STORE_H_
#define DDO_DAEMON_STORE_COMPONENT_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/common/background_queue.h"
#include "daemon/identity/caller.h"
#include "daemon/pool/host_pool.h"
#include "daemon/pool/segment_reserve.h"
#include "daemon/session/lease_registry.h"
#include "daemon/session/session_registry.h"
#include "daemon/store/backing_files.h"
#include "daemon/store/component_bytes.h"
#include "daemon/store/file_identity.h"
#include "daemon/store/safetensors.h"
#include "daemon/store/spill_ledger.h"
#include "daemon/store/upload_pipes.h"
#include "daemon/layout/tensor_table.h"

namespace ddo {

struct ManifestComponent;

enum class ComponentState { kUploading, kReady };

// Where a READY component's bytes are served from: its pool segments, or (the file tier, for a
// component larger than the pool can give it) the safetensors files it was loaded from, whose
// descriptors ddod keeps (backing_files.h) and reads with pread; or split, some units in a
// pool segment of its own and the rest read from its files (what the pool could give it).
enum class ComponentTier { kPool, kFile, kSplit };

// A consistent copy of one component's state, for answers and listings.
struct ComponentSnapshot {
  std::string component_id;
  std::string cache_key;
  std::string structure_hash;
  std::string content_hash;
  ComponentState state = ComponentState::kUploading;
  uint64_t total_bytes = 0;
  uint32_t unit_count = 0;
  // The segment the component allocated itself (empty while it is being allocated).
  std::string segment_name;
  uint64_t segment_size = 0;
  struct Segment {
    std::string name;
    uint64_t size = 0;
  };
  // Every segment it uses, its own first; TensorEntry::segment indexes this.
  std::vector<Segment> segments;
  bool pinned = false;  // its own segment
  // A derived version: the root base's key and component id; empty otherwise.
  std::string base_cache_key;
  std::string base_component_id;
  uint32_t changed_tensors = 0;  // tensors stored in its own segment (0: not derived)
  uint64_t own_bytes = 0;        // their bytes (total_bytes when not derived)
  uint32_t sessions = 0;
  absl::Time last_used;
  // Evicted after this long unused (no session): zero for ddod's default (--keep-alive),
  // absl::InfiniteDuration() for never (only the pool's LRU evicts it then).
  absl::Duration keep_alive = absl::ZeroDuration();
  int64_t uploader_pid = 0;
  uid_t owner_uid = 0;  // whose name the key is: only they (or an admin) evict it
  std::vector<TensorEntry> tensors;
  // kFile: no pool segment (segments and segment_name are empty); the tensors' bytes are in
  // the backing files. pool_bytes + file_bytes == total_bytes.
  ComponentTier tier = ComponentTier::kPool;
  uint64_t pool_bytes = 0;
  uint64_t file_bytes = 0;
  // kFile and kSplit: the backing files (their descriptors stay open while a snapshot holds
  // them); kSplit: which tensors (by table index) are read from them, the others being in the
  // pool segment.
  std::shared_ptr<const BackingFiles> files;
  std::shared_ptr<const std::vector<bool>> in_file;
};


struct RegisterResult {
  ComponentSnapshot component;
  bool warm_hit = false;
  std::string upload_id;  // empty on a warm hit
  // A streamed upload (upload_pipes.h): the write end of each of its pipes, in stream order,
  // for the caller to grant; the store keeps none. Empty for every other upload.
  std::vector<std::shared_ptr<const UniqueFd>> stream_write_ends;
};

// Whether LoadSafetensors may leave a component in its files (the file tier) instead of the
// pool. kAuto: only when the pool cannot make room for it (MakeRoomLocked would refuse);
// kNever: that refusal is the answer (RESOURCE_EXHAUSTED, as before the file tier); kPrefer:
// always, nothing read into the pool (the streaming sessions read the files).
enum class FileTier { kAuto, kNever, kPrefer };

struct SafetensorsRequest {
  std::string cache_key;
  std::vector<SafetensorsSource> files;     // open descriptors; read only through them
  std::optional<SafetensorsSource> index;   // a *.safetensors.index.json, when there is one
  std::string content_hash;
  std::map<std::string, uint32_t> units;  // empty: one unit per tensor
  FileTier file_tier = FileTier::kAuto;
};

// RegisterDerived's request: see RegisterComponentRequest.base_cache_key.
struct DerivedRequest {
  std::string cache_key;
  std::string base_cache_key;
  std::vector<std::string> changed_tensors;
  std::string content_hash;  // of the changed tensors' bytes, in table order (required)
};

struct LoadResult {
  ComponentSnapshot component;
  bool warm_hit = false;
  double seconds = 0;
};

struct HostAttachment {
  std::string session_id;
  ComponentSnapshot component;
  // The component's bytes (every segment it uses): valid while this is held.
  ComponentBytes bytes;
};

struct StoreStats {
  uint32_t components = 0;  // READY
  uint64_t used_bytes = 0;  // segment bytes of READY components, each segment once
  uint32_t sessions = 0;
  uint64_t evictions = 0;
  uint32_t adopted = 0;
  uint64_t file_bytes = 0;     // tensor bytes of READY file-tier components
  uint32_t backing_files = 0;  // descriptors they hold, and pooled ones kept for demotion
  uint64_t spilled_bytes = 0;  // bytes of uploads' spill files on disk
  uint64_t prefaulted_ready_bytes = 0;  // the pre-faulted reserve's segment ready now
};

struct StoreOptions {
  // Where the pool manifest lives ("<state dir>/pool-<namespace>/manifest.json").
  std::string manifest_path;
  // Threads that read safetensors files.
  int read_threads = 4;
  // Per uid (admins excepted): uploads in progress and the bytes its components take: the
  // segments they map (each once) plus their tensor tables' estimated heap
  // (TableHeapEstimate); 0 bytes: the pool budget is the only bound.
  size_t max_uploads_per_uid = 8;
  uint64_t max_bytes_per_uid = 0;
  // Per uid (admins excepted): tensor-table heap of its components, whatever
  // max_bytes_per_uid says (tables live in ddod's heap, outside the pool's budget).
  uint64_t max_table_bytes_per_uid = uint64_t{1} << 30;
  // Descriptors file-tier components keep open: per uid (admins excepted) and in all. Such a
  // component costs no pool bytes, so without them one user could hold every descriptor ddod
  // has (and nobody could connect). DaemonServer caps the total by RLIMIT_NOFILE.
  size_t max_backing_files_per_uid = 256;
  size_t max_backing_files = 4096;
  // Spilling uploads (spill_file.h): the directory of the unnamed spill files (ddod's own,
  // private), the bytes they may take on disk in all (0: no spilling) and per uid (0: all of
  // it). Uploads are spilled in the background once the pool is 3/4 full, so that they can
  // go to their files, as loaded components do, instead of being evicted.
  std::string spill_directory = "";
  uint64_t spill_budget_bytes = 0;
  uint64_t max_spill_bytes_per_uid = 0;
  // The pre-faulted reserve the segments ddod fills from files come from when it has one
  // ready (loads, promotions); nullptr: none. It must outlive the store.
  SegmentReserve* reserve = nullptr;
  // The manifest's writes, the safetensors reads and the removal of leftover segments go
  // through it (nullptr: the pool's, HostPool::file_system()); it must outlive the store.
  FileSystem* file_system = nullptr;
  // The time the store stamps on components (their last use, from which keep-alives and the
  // LRU count; durations it logs stay on the real clock), called from any thread, with the
  // store's mutex held: nullptr for absl::Now. A test passes one it moves by hand.
  std::function<absl::Time()> clock = nullptr;
};

// A promotion under way (ComponentStore::Promote, component_store_tiering.cc): what it
// reads into a new segment and where.
struct Promotion {
  std::string key;  // KeyOf
  std::vector<size_t> indices;       // the tensors (table indexes) the new segment holds
  std::vector<TensorEntry> pooled;   // their entries laid out in it
  uint64_t span = 0;
  bool whole = false;                // all of them: the component becomes kPool
  uint64_t moved_bytes = 0;          // tensor bytes read from the files
  std::shared_ptr<const BackingFiles> files;
  std::vector<std::shared_ptr<PoolSegment>> old_segments;
  std::shared_ptr<const std::vector<bool>> in_file;  // null: every tensor is in the files
  std::vector<TensorEntry> tensors;  // the table when it began
  uint64_t tier_changes = 0;
};

class ComponentStore {
 public:
  // Sessions (host attaches) are recorded in `sessions`, the daemon's one registry; the store
  // keeps each component's count of them (a component in use is never evicted).
  ComponentStore(HostPool& pool, SessionRegistry& sessions, StoreOptions options);
  ComponentStore(const ComponentStore&) = delete;
  ComponentStore& operator=(const ComponentStore&) = delete;
  ~ComponentStore();

  // Adopts the components a previous ddod of this pool left (manifest + segments), verifying
  // each; discards and logs whatever cannot be trusted, and removes leftover segments.
  void AdoptPrevious();

  // Registers a tensor table under `cache_key` (the caller uid's name): a warm hit when the
  // caller's key holds the same structure (and content hash, when given); otherwise a new
  // upload the lease owns. Another uid's component is never the answer: bytes a client wrote
  // stay its uid's. ABORTED while another client of the uid uploads the key;
  // FAILED_PRECONDITION when a different component under the key is in use; RESOURCE_EXHAUSTED when no
  // room can be made or the caller's uid is at a limit (named). Reserving a new upload's
  // pages takes time that grows with its size: `progress` (optional) counts them, and
  // cancelling it ends the call with CANCELLED and no upload left behind.
  // `streams` > 0 asks for a streamed upload (upload_pipes.h) of at most that many pipes
  // (capped at StoreOptions::read_threads and kMaxUploadStreams): the segment is one ddod
  // fills (the pre-faulted reserve when it can), the client writes the pipes, and Commit reads
  // them; 0, a segment the client writes, copied at commit.
  absl::StatusOr<RegisterResult> Register(const Lease& lease, const std::string& cache_key,
                                          std::vector<TensorEntry> tensors,
                                          const std::string& content_hash,
                                          WorkProgress* progress = nullptr, int streams = 0);

  // Registers under `request.cache_key` a derived version of the READY component under
  // `request.base_cache_key`: the base's table, the changed tensors laid out in a new segment
  // (the upload: only they are written), every other tensor shared with the base's bytes.
  // NOT_FOUND when the caller may not read the base (as if absent); INVALID_ARGUMENT naming
  // the problem with the keys, the changed names or the content hash (required); a warm hit
  // when the key holds a READY derived version with the same changed tensors and content hash
  // whose other tensors are the very bytes the base has; otherwise the replacement rules and
  // errors of Register. The base is the caller's own; a derived version is never shared.
  absl::StatusOr<RegisterResult> RegisterDerived(const Lease& lease, const DerivedRequest& request,
                                                 WorkProgress* progress = nullptr);

  // Completes an upload. A client's upload segment is copied into a new segment, the one
  // served (the client's writable mapping cannot be revoked: the upload segment is punched
  // out as the copy goes, then truncated and unlinked, so the client's old mapping faults
  // instead of writing served bytes); then the content hash, when one was given, is checked
  // on the copy (the bytes of the component's own segment: all its tensors, or a derived
  // version's changed ones), the segment pinned and the component published. `progress`
  // (optional) counts the bytes copied and hashed; pinning reports nothing until it ends.
  absl::StatusOr<ComponentSnapshot> Commit(const std::string& lease_id,
                                           const std::string& upload_id,
                                           WorkProgress* progress = nullptr);

  // Discards an upload; returns the bytes freed.
  absl::StatusOr<uint64_t> Abort(const std::string& lease_id, const std::string& upload_id);

  // Reads safetensors files straight into a new component (or finds it warm), through the
  // request's descriptors (validated first; see safetensors.h). When request.file_tier is
  // kPrefer, or kAuto and the pool cannot make room for it, the component is READY on the file tier
  // instead: nothing is read into the pool, the descriptors are kept (evicting it closes
  // them), a given content hash is checked by streaming the files through a bounded buffer,
  // and it is never another uid's sharing-proof target. `progress` gets
  // (bytes_done, bytes_total) from any thread; `cancelled` stops the validation and the read.
  absl::StatusOr<LoadResult> LoadSafetensors(
      const Lease& lease, SafetensorsRequest request,
      const std::function<void(uint64_t, uint64_t)>& progress,
      const std::function<bool()>& cancelled);

  // The caller's READY component under `cache_key`: NOT_FOUND when it has none (another
  // uid's entry under the same name is not there for it).
  absl::StatusOr<ComponentSnapshot> Get(const std::string& cache_key, const Caller& caller) const;
  // The caller's components; an admin's listing has everyone's (owner_uid says whose).
  std::vector<ComponentSnapshot> List(const Caller& caller) const;
  // Whether the caller uid has a component under `cache_key`.
  bool MayRead(const std::string& cache_key, const Caller& caller) const;

  // Undoes a commit whose caller was told it failed (its lease ended meanwhile): removes
  // `owner`'s component under `cache_key` if it still lives in `segment_name` and no session
  // uses it.
  void DiscardUnused(uid_t owner, const std::string& cache_key, const std::string& segment_name);

  // Removes an unused component of the caller (or, for an admin naming `owner`, of that uid);
  // returns the bytes the pool released (0 when another entry still uses its bytes: they go
  // with the last component that uses them).
  absl::StatusOr<uint64_t> Evict(const std::string& cache_key, const Caller& caller,
                                 std::optional<uid_t> owner = std::nullopt);

  // The keep-alive of the caller's READY component: ComponentSnapshot::keep_alive.
  absl::Status SetKeepAlive(const std::string& cache_key, const Caller& caller,
                            absl::Duration keep_alive);
  // Evicts the READY components unused for longer than their keep-alive (`fallback` for those
  // with ddod's default; infinite: never), as an LRU eviction would (a base a derived version
  // shares waits for it). Returns their keys.
  std::vector<std::string> EvictIdle(absl::Time now, absl::Duration fallback);

  // A host session: the component stays until Detach or the lease ends. The component is the
  // lease caller's own (NOT_FOUND otherwise, as if absent); the session is
  // added to the registry (RESOURCE_EXHAUSTED at the uid's limit of sessions).
  // A file-tier component has no segment: its attachment's bytes are its backing files
  // (read with ComponentBytes::ReadTensor or ReadRanges, never DataOf).
  absl::StatusOr<HostAttachment> AttachHost(const Lease& lease, const std::string& cache_key);
  // Ends a session and lets its component go: NOT_FOUND, or PERMISSION_DENIED unless `caller`
  // runs as the session's uid or is an admin (SessionRegistry::FindFor).
  absl::Status Detach(const std::string& session_id, const Caller& caller);

  // Everything a lease owned: uploads discarded, sessions ended.
  void ReleaseLease(const std::string& lease_id);

  StoreStats Stats() const;

  // The bytes of the client uploads in progress, by the uploading process: the copy that
  // process still holds of what it uploads (HostMemoryMeter does not count it twice).
  std::map<int64_t, uint64_t> UploadingBytesByPid() const;

  // Pool bytes moving between the pool and the files (docs/architecture.md §6, "Phases and
  // the pool"). A caller only ever moves its own components.
  struct Demoted {
    std::string cache_key;
    uint64_t bytes = 0;  // the pool bytes released
  };
  // Demotes the caller's unused components that have backing files, outside `spared` (cache
  // keys), least recently used first, until the pool has `bytes` free (or none is left).
  std::vector<Demoted> DemoteForRoom(const Caller& caller, uint64_t bytes,
                                     const std::set<std::string>& spared);
  // Whether demoting the caller's other unused components (outside `spared`) would let
  // Promote read more of its file-tier component `cache_key` back: all of it, or at least
  // LeastWorthPromoting more. A split component's pool part stays until the new segment
  // replaces it, so it grows only into room beyond that part: when that room cannot come,
  // demoting the others would only send them to their files for nothing.
  bool DemotingOthersHelps(const std::string& cache_key, const Caller& caller,
                           const std::set<std::string>& spared) const;
  // What promoting the caller's READY component `cache_key` whole asks of the pool: its
  // segment's bytes and the margin Promote leaves free for sessions (both 0 when it is in
  // the pool already, or not the caller's).
  struct PromotionNeed {
    uint64_t bytes = 0;
    uint64_t margin = 0;
  };
  PromotionNeed PromotionBytes(const std::string& cache_key, const Caller& caller) const;
  // Reads the caller's file-tier (kFile or kSplit) component `cache_key` back into one pool
  // segment of its own: all of it (tier kPool) when the pool's free bytes, less a margin for
  // streaming sessions, hold it; else as many units as they hold, spread (kSplit). It never
  // evicts anything: it takes free room only. Sessions attached meanwhile keep what they
  // attached (the files); the new segment is only seen once complete. Returns the bytes
  // moved into the pool (0: nothing to do or no room); NOT_FOUND when the caller has no such
  // component; ABORTED when it changed meanwhile or another promotion runs; CANCELLED; a
  // read error. `whole_only`: all of it or nothing (a phase that runs the component now
  // would otherwise leave it split, and a later promotion to whole needs room for both).
  absl::StatusOr<uint64_t> Promote(const std::string& cache_key, const Caller& caller,
                                   const std::function<bool()>& cancelled,
                                   bool whole_only = false);

  // Writes the READY upload `cache_key` of `uid` to a spill file (spill_file.h) and keeps it
  // as the files it can be demoted to; nothing when it is gone, changed meanwhile, has files
  // already, or the spill budget, the descriptor limits or the disk do not allow it (logged).
  // Runs on the spill worker.
  void SpillUpload(uid_t uid, const std::string& cache_key,
                   const std::function<bool()>& cancelled);
  // Waits until no spill is queued or running (tests).
  void WaitSpills() { spills_.WaitIdle(); }

  // At shutdown: with `discard`, every segment and the manifest are removed; otherwise
  // READY components stay in /dev/shm for the next ddod, unfinished uploads are removed.
  void Close(bool discard);

 private:
  struct Component {
    ComponentSnapshot info;  // info.sessions and info.last_used are live here
    // Own first (null while being allocated), then the segments shared with a base. An entry
    // that shares another uid's copy by proof has that copy's segments.
    std::vector<std::shared_ptr<PoolSegment>> segments;
    std::string upload_id;
    std::string owner_lease;  // while uploading
    bool client_written = false;  // its bytes came from a client, not from files
    // A streamed upload's pipes while it uploads (null once Commit took them: a second
    // Commit finds none); `streamed` stays true.
    std::shared_ptr<UploadPipes> pipes;
    bool streamed = false;
    std::vector<FileIdentity> sources;  // the files it was read from; empty for uploads
    // The SHA-256 other users' files must match to share it (safetensors_hash.h's
    // ProofDigest): computed when a proof first needs it, not at load; "" until then.
    std::string proof_digest;
    // The file tier (info.tier kFile or kSplit): the descriptors and each tensor's range.
    // Shared with the ComponentBytes handed out, so a reader keeps them open while it reads.
    std::shared_ptr<const BackingFiles> files;
    // kSplit: the tensors still read from the files (the others are in segments[0]).
    std::shared_ptr<const std::vector<bool>> in_file;
    // A kPool component read from files: the descriptors kept so that it can be demoted to
    // them (DemoteLocked) instead of discarded; null for uploads, adopted components and
    // loads past the descriptor limits. Counted in those limits like `files`.
    std::shared_ptr<const BackingFiles> pooled_files;
    // Its bytes were read back from its files after the load (Promote): its owner could
    // have changed them meanwhile, so it is never another uid's sharing-proof target.
    bool reread = false;
    bool promoting = false;      // a Promote reads its units now
    uint64_t tier_changes = 0;   // bumped by every demotion and promotion
    // An upload spilled to a file of ddod's (its `pooled_files`, or `files` once demoted):
    // the spill budget it holds, given back when the component goes.
    std::shared_ptr<SpillLedger::Charge> spill;
  };
  // The map's key: the owner uid and its cache key.
  static std::string KeyOf(uid_t uid, const std::string& cache_key);
  // Another uid's READY component with this structure, loaded from files (an upload from
  // memory is never shared, nor is a derived version), when the caller has no READY
  // component under `cache_key`: what a caller must prove it holds the bytes of (by its
  // files' SHA-256) to share it. One read from the same files (`sources`, the file identity)
  // is preferred, then one under the same key: the identity only says which to compare with,
  // it proves nothing (a MAP_SHARED write leaves it as it was). A few candidates, best first;
  // none when there is none.
  struct ProofTarget {
    std::string key;                       // KeyOf its owner and key
    ComponentBytes bytes;                  // keeps the bytes while they are hashed
    std::vector<TensorEntry> tensors;      // with offsets
    std::string proof_digest;              // "" until a proof computed it
    std::string content_hash;              // its XXH3 content hash, when known
  };
  std::vector<ProofTarget> FindProofTargets(const std::string& cache_key, const Caller& caller,
                                             const std::string& structure_hash,
                                             const std::vector<FileIdentity>& sources) const;
  // The proof: hashes the caller's files once (SHA-256 and the XXH3 content hash, in one read)
  // and, unless a proof did before, each target's bytes (SHA-256; the first one's on a second
  // thread meanwhile); for the first target whose digest is the files' (and when
  // `announced_hash`, if any, is the files' content hash), makes
  // an entry of `caller` under `cache_key` that shares the target's segments. Nothing when
  // the bytes differ or the component went meanwhile;
  // CANCELLED, or the files' read error.
  absl::StatusOr<std::optional<ComponentSnapshot>> ShareByProof(
      const Lease& lease, const std::string& cache_key, const SafetensorsSet& set,
      const std::vector<FileIdentity>& sources, const std::string& announced_hash,
      std::vector<ProofTarget>& targets, const std::function<bool()>& cancelled);
  // Keeps the proof digest computed for the component in `segment_name` (when it is still
  // under `key`, a KeyOf), so that the next proof does not hash its bytes again.
  void RememberProofDigest(const std::string& key, const std::string& segment_name,
                           const std::string& proof_digest);
  // The caller's entry under `cache_key` sharing the segments of the component in
  // `segment_name` (still under `target_key`): NOT_FOUND when that was replaced or evicted
  // meanwhile; the errors of ClearKeyLocked and the uid's limits.
  absl::StatusOr<ComponentSnapshot> AddSharedEntry(const Lease& lease,
                                                   const std::string& cache_key,
                                                   const std::string& target_key,
                                                   const std::string& segment_name,
                                                   const std::string& content_hash,
                                                   const std::string& proof_digest,
                                                   const std::vector<FileIdentity>& sources);
  // One session fewer on `uid`'s component under `cache_key` (if it is still there).
  void UnpinLocked(uid_t uid, const std::string& cache_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED naming the limit when `caller` (not an admin) may not add an entry
  // mapping `segments` more (those it does not map yet count: a new upload's is `new_bytes`)
  // with `tensors` table entries; `upload`: it starts an upload.
  absl::Status CheckUploadLimitsLocked(const Caller& caller, uint64_t new_bytes,
                                       const std::vector<std::shared_ptr<PoolSegment>>& segments,
                                       const std::vector<TensorEntry>& tensors,
                                       bool upload = true) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Who fills an upload's segment: ddod from files (a load), the client through the segment
  // (copied at commit), or the client through pipes that ddod reads at commit.
  enum class UploadRoute { kLoad, kSegment, kStreamed };
  // Steps shared by Register and LoadSafetensors. `sources` (LoadSafetensors only) are the
  // identities of the caller's files, kept as the hint FindProofTarget uses; `streams`: the
  // pipes of a kStreamed upload; `refused_for_room` (optional) is set when the error is
  // MakeRoomLocked's (the pool cannot make room).
  absl::StatusOr<RegisterResult> BeginUpload(const Lease& lease, const std::string& cache_key,
                                             std::vector<TensorEntry> tensors,
                                             const std::string& content_hash,
                                             const std::vector<FileIdentity>& sources = {},
                                             WorkProgress* progress = nullptr,
                                             UploadRoute route = UploadRoute::kLoad,
                                             int streams = 0,
                                             bool* refused_for_room = nullptr);
  // LoadSafetensors's read of the set into the upload `begun` and its commit (the load
  // began at `started`, for the log).
  absl::StatusOr<ComponentSnapshot> ReadAndCommit(
      const Lease& lease, const RegisterResult& begun, const SafetensorsSet& set,
      const std::function<void(uint64_t, uint64_t)>& progress,
      const std::function<bool()>& cancelled, absl::Time started);
  // LoadSafetensors's file tier (component_store_file_tier.cc): takes the set's descriptors,
  // checks a given content hash by streaming the files, and inserts the caller's READY
  // file-backed entry under request.cache_key (or answers a warm hit found meanwhile).
  absl::StatusOr<LoadResult> LoadFileBacked(const Lease& lease,
                                            const SafetensorsRequest& request,
                                            SafetensorsSet& set, std::vector<TensorEntry> tensors,
                                            const std::vector<FileIdentity>& sources,
                                            const std::function<bool()>& cancelled);
  // Inserts `component` (READY, file tier) under the caller's key after the replacement rules
  // and limits of an upload; a warm hit when the key holds the same component.
  // Moves some units of the file-tier component `key` of `caller` into a pool segment of its
  // own, as many as the pool can give now while leaving room for streaming sessions (tier
  // kSplit), spread over the component so that file reads alternate with pool units; the
  // snapshot afterwards (the same one when nothing moved: no room, or a read failed).
  ComponentSnapshot PromoteToFit(const Caller& caller, const ComponentSnapshot& loaded,
                                 const std::function<bool()>& cancelled);
  // After a load into the pool: keeps the set's descriptors with the caller's component
  // `ready` (still the same segment) so that it can be demoted to its files later, while the
  // descriptor limits allow; otherwise they close with the set (it can only be discarded).
  void KeepBackingFiles(const Caller& caller, const ComponentSnapshot& ready,
                        SafetensorsSet& set);
  // Promote's first step: plans the promotion of the caller's component `cache_key` into
  // the pool's free room and marks it `promoting`; nullopt when there is nothing to move
  // (or, `whole_only`, when the room does not hold all of it).
  absl::StatusOr<std::optional<Promotion>> BeginPromotionLocked(const std::string& cache_key,
                                                                const Caller& caller,
                                                                bool whole_only)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pool bytes of `component`'s segments.
  static uint64_t PooledFootprint(const Component& component);
  // Promote's last step: the new segment replaces the old ones if the component is still the
  // one `promotion` began with (ABORTED otherwise; the segment is discarded).
  absl::Status FinishPromotionLocked(const Promotion& promotion,
                                     std::shared_ptr<PoolSegment> segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `component` can be demoted now: READY, unused, not promoting, with backing files
  // and pool bytes that only it uses.
  bool DemotableLocked(const Component& component) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a demotable component's pool segments: it stays READY on the file tier (kFile),
  // streamed from its files, and leaves the manifest (the caller persists). Returns the
  // bytes the pool released.
  uint64_t DemoteLocked(std::map<std::string, Component>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED when `more` descriptors kept for the file tier would pass the caller's
  // limit (not for admins) or ddod's (StoreOptions::max_backing_files*).
  absl::Status CheckBackingFileLimitsLocked(const Caller& caller, size_t more) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<LoadResult> InsertFileBackedLocked(const Lease& lease, Component component)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The upload's bytes, table and announced hash; for Commit (`client_written` and `pipes`
  // not null) also how it was written, and a streamed upload's pipes, taken out of it
  // (FAILED_PRECONDITION when another Commit took them).
  absl::StatusOr<ComponentBytes> BytesOfUpload(const std::string& lease_id,
                                               const std::string& upload_id,
                                               std::vector<TensorEntry>* tensors,
                                               std::string* content_hash,
                                               bool* client_written = nullptr,
                                               std::shared_ptr<UploadPipes>* pipes = nullptr);
  // Before an upload under the caller's `cache_key`: ABORTED while one is in progress there;
  // a warm hit (the snapshot) when `same` says the READY component there is the one asked
  // for; otherwise removes it (FAILED_PRECONDITION while in use).
  absl::StatusOr<std::optional<ComponentSnapshot>> ClearKeyLocked(
      const Caller& caller, const std::string& cache_key,
      const std::function<bool(const Component&)>& same) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts the upload `upload_id` of the lease under its caller's key (placeholder.info's
  // cache_key), UPLOADING: `placeholder` comes with its key, hashes, sizes, table and
  // segments (the own one, first, still null); this adds what every upload has (its id,
  // owner, lease, time and the footprint of its own segment of `span` bytes).
  void AddPlaceholderLocked(const Lease& lease, const std::string& upload_id, uint64_t span,
                            bool client_written, Component placeholder)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RegisterDerived's steps under the lock: plans the version of the caller's base, then
  // answers the warm hit (its snapshot) or inserts the placeholder `upload_id` (nothing),
  // its own segment of `*span` bytes still to allocate.
  absl::StatusOr<std::optional<ComponentSnapshot>> BeginDerivedLocked(
      const Lease& lease, const DerivedRequest& request, const std::string& upload_id,
      uint64_t* span) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AdoptPrevious's step for one manifest entry: checks it, adopts its segments (each once:
  // `adopted` has those adopted already) and inserts it; otherwise an error saying why not.
  absl::Status AdoptEntryLocked(ManifestComponent& entry,
                                std::map<std::string, std::shared_ptr<PoolSegment>>& adopted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commit's read of a streamed upload's `pipes` into its own segment (`bytes`); the upload
  // is aborted when the read fails.
  absl::Status FillFromStreams(const std::string& lease_id, const std::string& upload_id,
                               const std::vector<TensorEntry>& tensors, UploadPipes& pipes,
                               const ComponentBytes& bytes, WorkProgress* progress);
  // Commit's copy of a client-written upload (CopyUpload) into the upload's own segment;
  // `bytes` then has the copy. The upload is aborted when the copy fails.
  absl::Status CopyClientUpload(const std::string& lease_id, const std::string& upload_id,
                                const std::vector<TensorEntry>& tensors, ComponentBytes& bytes,
                                WorkProgress* progress);
  // Allocates the placeholder's own segment of `span` bytes outside the lock and answers the
  // upload (ABORTED when the lease ended meanwhile, CANCELLED when `progress` was). A segment
  // ddod fills itself (a load or a streamed upload: `fill_extents`, its tensors' (offset,
  // bytes), not null) comes from the pre-faulted reserve when it can, else with `fresh_pages`.
  absl::StatusOr<RegisterResult> AllocateUpload(const std::string& upload_id,
                                                const std::string& cache_key, uint64_t span,
                                                const Caller& caller, WorkProgress* progress,
                                                const SegmentExtents* fill_extents = nullptr,
                                                SegmentPages fresh_pages = SegmentPages::kReserved);
  // (offset, bytes) of each tensor in the component's own segment (segment 0).
  static SegmentExtents OwnExtents(const std::vector<TensorEntry>& tensors);
  // Lays `tensors` out for a segment that ddod's readers fill: on the pre-pinned reserve's grid
  // (LayOutOnGrid) when the reserve would be taken for it, else as LayOut. Returns the span.
  uint64_t LayOutToFill(std::vector<TensorEntry>& tensors) const;
  // A segment of `span` bytes that ddod's readers fill (SegmentTarget) with the tensors at
  // `extents`: the pre-faulted reserve's when one is ready and large enough (its registrations
  // that a tensor crosses undone, for the fill's own pinning), else a new one in /dev/shm
  // with `fresh_pages`: kReserved for readers that write through its descriptor (a load),
  // kPopulated for those that write through its mapping (a streamed upload's).
  absl::StatusOr<std::shared_ptr<PoolSegment>> AllocateToFill(
      uint64_t span, const SegmentExtents& extents, WorkProgress* progress,
      SegmentPages fresh_pages = SegmentPages::kReserved);
  // Evicts unused READY components, least recently used first, until `bytes` fit. Only those
  // whose eviction releases bytes count (a base whose bytes a derived version uses releases
  // nothing until that one goes too); the components under `for_key` and `spared` (KeyOf
  // keys) stay.
  absl::Status MakeRoomLocked(const std::string& for_key, uint64_t bytes,
                              const std::set<std::string>& spared = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The bytes the pool would release if `component` went now: its segments no other
  // component uses.
  uint64_t ReleasableBytesLocked(const Component& component) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The component under `cache_key` of the caller (or of `owner`, for an admin): NotFound
  // when there is none; PermissionDenied for a non-admin naming another owner.
  absl::StatusOr<std::map<std::string, Component>::iterator> FindOwnedLocked(
      const std::string& cache_key, const Caller& caller, std::optional<uid_t> owner = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases a component; each of its segments that no other component uses is marked to leave
  // /dev/shm when the last user lets go. Returns the bytes of those segments.
  uint64_t DiscardLocked(std::map<std::string, Component>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, Component>::iterator FindUploadLocked(const std::string& upload_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rewrites the manifest with the READY components.
  void PersistLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ComponentSnapshot SnapshotLocked(const Component& component) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An upload that could be spilled: READY, no files, its own segments.
  static bool SpillableLocked(const Component& component);
  // Queues the spill of every spillable upload once the pool is 3/4 full.
  void QueueSpillsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The store's time now (StoreOptions::clock).
  absl::Time Now() const { return clock_(); }

  HostPool& pool_;
  SessionRegistry& sessions_;
  const StoreOptions options_;
  FileSystem& fs_;
  const std::function<absl::Time()> clock_;  // StoreOptions::clock, or absl::Now
  // Before components_: their charges go back to it when they go.
  SpillLedger spill_ledger_;

  mutable absl::Mutex mu_;
  std::map<std::string, Component> components_ ABSL_GUARDED_BY(mu_);  // by KeyOf
  uint64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t adopted_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // The spills of uploads (SpillUpload), on their own thread. Last: stopped (Close) before
  // the members its jobs use go.
  BackgroundQueue spills_;
};

// 16 hex digits naming a component: a hash of its key and structure.
std::string ComponentId(const std::string& cache_key, const std::string& structure_hash);

// INVALID_ARGUMENT unless `content_hash` is of the form xxh3-64:<16 lowercase hex digits>.
absl::Status CheckContentHashForm(const std::string& content_hash);

// What a tensor table costs ddod's heap: its entries (measured at about 4 KiB per tensor
// through the service, with the copies its snapshots make) and their strings.
uint64_t TableHeapEstimate(const std::vector<TensorEntry>& tensors);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_COMPONENT_STORE_H_
