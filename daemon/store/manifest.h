// File: daemon/store/manifest.h
//
// The pool manifest: what a later ddod needs to adopt the segments this one leaves behind
// (after a restart or a crash). One JSON file per pool, replaced atomically (write a temporary
// file, fsync, rename) after every change, and protected by a checksum over its component list
// so that a torn or edited file is recognised and not trusted. A component lists every segment
// it uses (its own first; a derived version's shared ones after it) and each tensor the index
// of its segment; manifests from before derived versions (one "segment_name", no index) read
// as one segment, index 0.
//
// Thread-safety: plain values; WriteManifest and ReadManifest touch only the file named, and the
// store serializes its writes of one pool's manifest under its lock (PersistLocked).
#ifndef DDO_DAEMON_STORE_MANIFEST_H_
#define DDO_DAEMON_STORE_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include <sys/types.h>

#include "daemon/common/file_system.h"
#include "daemon/store/file_identity.h"
#include "daemon/layout/tensor_table.h"

namespace ddo {

struct ManifestSegment {
  std::string name;
  uint64_t size = 0;
  bool operator==(const ManifestSegment& other) const {
    return name == other.name && size == other.size;
  }
};

struct ManifestComponent {
  std::string cache_key;
  std::string component_id;
  std::string structure_hash;
  std::string content_hash;  // "" when the client gave none
  std::vector<ManifestSegment> segments;  // own first
  std::vector<TensorEntry> tensors;      // with offsets and segment indexes
  uid_t owner_uid = 0;               // manifests written before owners: ddod's own uid
  // Other uids that proved they may read it: written by ddods before keys were per uid;
  // read only to say they are dropped (each reader shares by proof again on its next load).
  std::vector<uid_t> readers;
  bool client_written = false;       // a client wrote its bytes (an upload, not a load)
  std::vector<FileIdentity> sources;  // the files it was read from
  // A derived version: its root base's key and component id ("" otherwise).
  std::string base_cache_key;
  std::string base_component_id;
  // Its own keep-alive (`ddoctl load ... keep-alive=`): 0 for ddod's default, -1 for never.
  int64_t keep_alive_seconds = 0;
};

// Replaces the manifest at `path` atomically, through `fs` (nullptr: FileSystem::Default()).
// When the open, write, fsync or rename of "<path>.tmp" fails (ENOSPC, EIO...), the previous
// manifest is untouched and the temporary file is removed; the error names the operation, the
// file and the errno's text. A failed fsync of the directory afterwards is reported too, with
// the new manifest already in place.
absl::Status WriteManifest(const std::string& path,
                           const std::vector<ManifestComponent>& components,
                           FileSystem* fs = nullptr);

// NotFound when there is no manifest; DataLoss when it cannot be trusted (syntax, fields,
// checksum), with the reason.
absl::StatusOr<std::vector<ManifestComponent>> ReadManifest(const std::string& path);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_MANIFEST_H_
