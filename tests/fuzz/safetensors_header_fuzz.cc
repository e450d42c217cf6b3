// libFuzzer target: ParseSafetensorsHeader on arbitrary text. The input's first 8 bytes
// (little-endian) are the file size, the rest is the header's JSON text. Beyond not crashing,
// an accepted header must describe tensors that lie inside the file, in order, without overlap,
// with unique names; a refused one must say so in clean text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/store/safetensors.h"
#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ddo::FuzzCheck;
  uint64_t file_size = 0;
  for (size_t i = 0; i < 8 && i < size; ++i) {
    file_size |= uint64_t{data[i]} << (8 * i);
  }
  const size_t skip = std::min<size_t>(size, 8);
  const absl::string_view header(reinterpret_cast<const char*>(data) + skip, size - skip);

  auto file = ddo::ParseSafetensorsHeader("fuzz.safetensors", header, file_size);
  if (!file.ok()) {
    ddo::CheckMessageIsClean(file.status());
    return 0;
  }
  FuzzCheck(!file->tensors.empty(), "an accepted header has tensors");
  FuzzCheck(file->data_start == 8 + header.size(), "data starts right after the header");
  std::set<std::string> names;
  uint64_t covered_end = file->data_start;
  uint64_t previous_offset = 0;
  for (const ddo::SafetensorsTensor& tensor : file->tensors) {
    FuzzCheck(!tensor.name.empty(), "tensor names are not empty");
    FuzzCheck(names.insert(tensor.name).second, "tensor names are unique");
    FuzzCheck(tensor.file_offset >= file->data_start, "tensors start after the header");
    FuzzCheck(tensor.file_offset <= file_size && tensor.byte_size <= file_size - tensor.file_offset,
              "tensors end inside the file");
    FuzzCheck(tensor.file_offset >= previous_offset, "tensors are sorted by offset");
    previous_offset = tensor.file_offset;
    auto expected = ddo::TensorByteSize(tensor.dtype, tensor.shape);
    FuzzCheck(expected.ok() && *expected == tensor.byte_size, "byte size is shape x dtype");
    if (tensor.byte_size > 0) {
      FuzzCheck(tensor.file_offset >= covered_end, "non-empty tensors do not overlap");
      covered_end = tensor.file_offset + tensor.byte_size;
    }
  }
  return 0;
}
