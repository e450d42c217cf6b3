// File: daemon/store/direct_reader.h
//
// Reads a range of a file-backed component's backing file (backing_files.h) into a caller's
// buffer: positional reads (pread) through FileSystem, so tests inject faults. For now the
// reads are buffered (through the page cache); O_DIRECT into 4 KiB-aligned buffers is a later
// step of the file tier (docs/architecture.md §6).
//
// The file belongs to a client, which may change or shrink it at any time: a read that ends
// before the range does is DataLoss naming the file's base name and the offset where the
// bytes ran out, never a crash (ddod never maps these files, so there is no SIGBUS).
//
// ContentHashOfFiles streams every tensor of a file-tier component through one bounded buffer
// to check a content hash without holding the component in memory.
//
// Thread-safety: ReadRange and ContentHashOfFiles may be called from any thread, on one file from several at once;
// the caller keeps `dst` valid and untouched until it returns.
#ifndef DDO_DAEMON_STORE_DIRECT_READER_H_
#define DDO_DAEMON_STORE_DIRECT_READER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/common/file_system.h"
#include "daemon/layout/file_layout.h"
#include "daemon/store/backing_files.h"

namespace ddo {

// Reads exactly `range.bytes` bytes at `range.offset` of `file` into `dst`, looping over
// partial reads (an interrupted read is retried by FileSystem::Read). Errors: DataLoss when
// the file ends first ("<name> ended at offset N, inside the range ..."); a failed read as
// FileSystem::Read reports it (the context names the file); InvalidArgument for a null `dst`
// or a file without a descriptor. Reads go through `fs` (nullptr: FileSystem::Default()).
absl::Status ReadRange(const BackingFile& file, const FileRange& range, char* dst,
                       FileSystem* fs = nullptr);

// The content hash ("xxh3-64:<16 hex>", tensor_table.h's ContentHash) of the tensors of
// `files`, in table order, read through one buffer of at most `buffer_bytes` (at least 4 KiB).
// `cancelled` (may be empty) is asked before each read: CANCELLED when it says so. Errors
// as ReadRange.
absl::StatusOr<std::string> ContentHashOfFiles(const BackingFiles& files, uint64_t buffer_bytes,
                                               const std::function<bool()>& cancelled,
                                               FileSystem* fs = nullptr);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_DIRECT_READER_H_
