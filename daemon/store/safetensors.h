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
// Nothing in a file is trusted: every failure is InvalidArgument (NotFound for a missing
// input) and its message names the file and, where there is one, the tensor. Files are not
// kept open; whoever reads the data reopens them and must expect DataLoss if one shrank.
//
// Thread-safety: pure functions of their arguments and the file system; safe from any thread.
#ifndef DDO_DAEMON_STORE_SAFETENSORS_H_
#define DDO_DAEMON_STORE_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/store/dtype.h"

namespace ddo {

// Headers larger than this are refused (real ones are a few MiB at most).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t file_offset = 0;  // absolute offset in the file
  uint64_t byte_size = 0;
};

struct SafetensorsFile {
  std::string path;
  uint64_t file_size = 0;
  uint64_t data_start = 0;                 // 8 + header length
  std::vector<SafetensorsTensor> tensors;  // sorted by file_offset (then name)
  std::map<std::string, std::string> metadata;
};

// Validates a header given its JSON text and the size of the whole file (the header is taken
// to start at byte 8). `path` is for messages. Checks: a JSON object; each entry an object
// with a known dtype, a shape of non-negative integers and data_offsets of two non-negative
// integers begin <= end whose span is shape x dtype size and lies inside the file; no two
// non-empty tensors overlap; no tensor name twice or empty; __metadata__ maps strings to
// strings. Other keys inside an entry are ignored, as are gaps between tensors.
absl::StatusOr<SafetensorsFile> ParseSafetensorsHeader(const std::string& path,
                                                       absl::string_view header_json,
                                                       uint64_t file_size);

// Opens the file (a regular file; symlinks are followed), checks the length prefix
// (2 <= N <= kMaxSafetensorsHeaderBytes, 8 + N <= file size) and validates the header.
absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path);

struct SafetensorsSet {
  std::vector<SafetensorsFile> files;  // in input order; a folder's files sorted by name
  std::string index_path;              // "" when none
  uint64_t total_bytes = 0;            // sum of the tensors' byte sizes
};

// The files to load for a request. Each input is an absolute path to a safetensors file or to
// a directory (a Diffusers model folder), which stands for every *.safetensors in it (sorted
// by name; dotfiles skipped) plus its *.safetensors.index.json when it holds exactly one.
// `index_file` (absolute, or "") names an index explicitly and overrides any found in a
// folder. The same file reached twice (a folder and a file in it) is loaded once.
//
// Besides each file's own checks: at least one input, every path absolute (ddod's working
// directory is not the client's), no tensor name in two files, and, with an index, that its
// weight_map lists exactly the files being loaded as shards (base names relative to the
// index's directory), every tensor of every file, and each in the shard that holds it.
absl::StatusOr<SafetensorsSet> OpenSafetensorsSet(const std::vector<std::string>& inputs,
                                                  const std::string& index_file);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SAFETENSORS_H_
