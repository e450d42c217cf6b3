// File: daemon/store/backing_files.h
//
// A file-backed component's files (docs/architecture.md §6, the file tier): the descriptors
// ddod keeps of the safetensors files a component was loaded from, and where each of its
// tensors lies in them. The descriptors are the very ones the files were validated through,
// moved out of the SafetensorsSet: a path is never reopened (docs/security.md §2), so what
// was validated is what is read later, through pread only (direct_reader.h). ddod never maps
// a client's file, so a file that shrinks later gives a read error (DataLoss), never SIGBUS.
//
// A BackingFile's descriptor is shared (shared_ptr): a reader that copied it keeps it open
// while it reads, even if the component is evicted meanwhile; the descriptor closes when the
// last copy goes.
//
// Thread-safety: BackingFile and BackingFiles are immutable once built; copies may be used
// from any thread at once (pread on one descriptor from several threads is fine).
#ifndef DDO_DAEMON_STORE_BACKING_FILES_H_
#define DDO_DAEMON_STORE_BACKING_FILES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/common/file_system.h"
#include "daemon/layout/file_layout.h"
#include "daemon/store/file_identity.h"
#include "daemon/store/safetensors.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

struct BackingFile {
  std::shared_ptr<const UniqueFd> fd;
  std::string name;  // the file's base name, for messages (never a path to open)
  uint64_t size = 0;  // at load time
  FileIdentity identity;
  int get() const { return fd ? fd->get() : -1; }
};

class BackingFiles {
 public:
  BackingFiles() = default;

  // Moves every file's descriptor out of `set` (its files are left without one) and records
  // each tensor's range, in the set's order: its files in order, each file's tensors in
  // order, which is the order of the component's table (TableOfSafetensors). The size and
  // identity come from one fstat through `fs` (nullptr: FileSystem::Default()). On an error
  // (a descriptor missing or the fstat failing) the set keeps the descriptors not yet moved,
  // and the ones moved close.
  static absl::StatusOr<BackingFiles> TakeFrom(SafetensorsSet& set, FileSystem* fs = nullptr);
  // One file ddod wrote itself (an upload's spill file, spill_file.h), `ranges` in table
  // order (their `file` 0). The size and identity come from one fstat.
  static absl::StatusOr<BackingFiles> OfOwnFile(UniqueFd fd, const std::string& name,
                                                std::vector<FileRange> ranges,
                                                FileSystem* fs = nullptr);

  const std::vector<BackingFile>& files() const { return files_; }
  // Each tensor's range, in table order; ranges()[i].file indexes files().
  const std::vector<FileRange>& ranges() const { return ranges_; }
  const BackingFile& FileOf(const FileRange& range) const { return files_[range.file]; }
  bool empty() const { return files_.empty(); }
  // The descriptors held (each file once).
  size_t descriptors() const { return files_.size(); }
  // Sum of the tensors' bytes.
  uint64_t tensor_bytes() const { return tensor_bytes_; }

 private:
  std::vector<BackingFile> files_;
  std::vector<FileRange> ranges_;
  uint64_t tensor_bytes_ = 0;
};

// The part of `name` after its last '/' (all of it when there is none).
std::string BaseName(const std::string& name);

// The name a client asks ddod's identity socket to OPEN for backing file `index` of the
// component `component_id` (a SEGMENT_KIND_FILE segment of its answers): made up by ddod in the
// form of a shared-memory name ("/ddo-file-<id>-<index>"), never a path, and served only from
// the descriptor ddod holds (identity/segment_grant.h).
std::string BackingFileSegmentName(const std::string& component_id, size_t index);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_BACKING_FILES_H_
