// File: daemon/store/safetensors.h
//
// Reading and validating safetensors files and sets of them (a Diffusers model folder, its
// shards and their *.safetensors.index.json) before anything is loaded into the pool.
//
// Layout of a file: an 8-byte little-endian u64 N, then N bytes of a UTF-8 JSON object that
// maps each tensor name to {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}
// (offsets counted from the first byte after the header), with an optional "__metadata__"
// object of strings; then the tensor data.
//
// Every file is opened once and then only read through its descriptor (pread), never reopened
// by path: what was validated is what gets loaded, and a FIFO or device swapped in for a file
// is refused at once instead of blocking. Whoever reads the data later uses the same
// descriptor and must still expect DataLoss if the file shrank.
//
// Nothing in a file is trusted: every failure is InvalidArgument (NotFound for a missing
// input) and its message names the file and, where there is one, the tensor. Messages never
// quote bytes of a file that is not a well-formed JSON header: a broken length prefix or JSON
// text is described, not shown. Tensor names, metadata keys and dtype strings of a header
// that parsed are shown escaped and truncated (128 bytes). Header parsing is linear in the
// header's size (names are sorted once, O(n log n)), bounded by the caps below, and checks a
// `cancelled` callback every few thousand entries.
//
// Thread-safety: pure functions of their arguments and the descriptors they are given; safe
// from any thread. A SafetensorsFile/SafetensorsSet is not shared; reading through its
// descriptors with pread from several threads at once is fine.
#ifndef DDO_DAEMON_STORE_SAFETENSORS_H_
#define DDO_DAEMON_STORE_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/common/file_system.h"
#include "daemon/layout/dtype.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

// Limits on what ddod will parse (real headers are a few MiB and hold a few thousand tensors).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxSafetensorsEntries = 1'000'000;
inline constexpr uint64_t kMaxSafetensorsIndexBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxSafetensorsIndexEntries = 1'000'000;

// Asked every few thousand entries; true stops the work with CANCELLED. May be empty.
using CancelledFn = std::function<bool()>;

// One file to read: an open descriptor and the name it goes by. `name` is used in messages,
// and its base name (after the last '/') is what an index's weight_map must call the file.
struct SafetensorsSource {
  std::string name;
  UniqueFd fd;
};

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t file_offset = 0;  // absolute offset in the file
  uint64_t byte_size = 0;
};

struct SafetensorsFile {
  std::string name;  // the source's name
  UniqueFd fd;       // the descriptor it was read through (not set by
                     // ParseSafetensorsHeader)
  uint64_t file_size = 0;
  uint64_t data_start = 0;                 // 8 + header length
  std::vector<SafetensorsTensor> tensors;  // sorted by file_offset (then name)
  std::map<std::string, std::string> metadata;
};

// Validates a header given its JSON text and the size of the whole file (the header is taken
// to start at byte 8). `name` is for messages. Checks: a JSON object of at most
// kMaxSafetensorsEntries entries holding at least one tensor; each entry an object with a
// known dtype, a shape of non-negative integers and data_offsets of two non-negative integers
// begin <= end whose span is shape x dtype size and lies inside the file; no two non-empty
// tensors overlap; no tensor name twice or empty; no key twice inside an entry;
// __metadata__ maps strings to strings. Other keys inside an entry are ignored, as are gaps
// between tensors.
absl::StatusOr<SafetensorsFile> ParseSafetensorsHeader(const std::string& name,
                                                       absl::string_view header_json,
                                                       uint64_t file_size,
                                                       const CancelledFn& cancelled = {});

// Reads a file through its descriptor: fstat must show a regular file; then the length
// prefix (2 <= N <= kMaxSafetensorsHeaderBytes, 8 + N <= file size) and the header. The
// result has no descriptor (the caller keeps the source's). The fstat and the reads go
// through `fs` (nullptr: FileSystem::Default()).
absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const SafetensorsSource& source,
                                                    const CancelledFn& cancelled = {},
                                                    FileSystem* fs = nullptr);

// A *.safetensors.index.json: {"weight_map": {tensor: shard file name, ...}, ...}.
struct SafetensorsIndex {
  std::vector<std::pair<std::string, std::string>> weight_map;  // (tensor, shard), file order
};

// Validates an index's text (at most kMaxSafetensorsIndexBytes): a JSON object whose
// "weight_map" is an object of at most kMaxSafetensorsIndexEntries strings, no tensor twice.
// Other members are skipped unparsed beyond syntax. `name` is for messages.
absl::StatusOr<SafetensorsIndex> ParseSafetensorsIndex(const std::string& name,
                                                       absl::string_view text,
                                                       const CancelledFn& cancelled = {});

struct SafetensorsSet {
  std::vector<SafetensorsFile> files;  // in input order, each with its descriptor
  std::string index_name;              // "" when none
  uint64_t total_bytes = 0;            // sum of the tensors' byte sizes
};

// Validates a set of open files, keeping their descriptors. The same file given twice (same
// device and inode) is loaded once. Besides each file's own checks: at least one file, no
// tensor name in two files, and, with an index, that its weight_map lists exactly the files
// being loaded as shards (by base name), every tensor of every file, and each in the shard
// that holds it. Every fstat and read goes through `fs` (nullptr: FileSystem::Default()).
absl::StatusOr<SafetensorsSet> OpenSafetensorsSet(std::vector<SafetensorsSource> files,
                                                  std::optional<SafetensorsSource> index,
                                                  const CancelledFn& cancelled = {},
                                                  FileSystem* fs = nullptr);

// For callers that run as ddod's own user only (the service decides): resolves path inputs
// and opens each file once. Each input is an absolute path to a safetensors file or to a
// directory (a Diffusers model folder), which stands for every *.safetensors in it (sorted by
// name; dotfiles skipped) plus its *.safetensors.index.json when it holds exactly one.
// `index_file` (absolute, or "") names an index explicitly and overrides any found in a
// folder; when folders bring several different indexes and none is named, that is an error.
// Every path must be absolute (ddod's working directory is not the client's) and free of NUL
// bytes. Files are opened O_RDONLY|O_CLOEXEC|O_NOCTTY|O_NONBLOCK, must be regular files
// (symlinks are followed), and are left blocking. Sources are named by their normalized path.
absl::StatusOr<std::pair<std::vector<SafetensorsSource>, std::optional<SafetensorsSource>>>
OpenSafetensorsPaths(const std::vector<std::string>& inputs, const std::string& index_file);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SAFETENSORS_H_
