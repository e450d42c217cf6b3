#include "daemon/layout/tensor_table.h"

#include <xxhash.h>

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/common/status_macros.h"

namespace ddo {
namespace {

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Field separator: NUL-separated fields cannot run into each other.
constexpr absl::string_view kSeparator("\0", 1);

}  // namespace

absl::Status ValidateTensorTable(const std::vector<TensorEntry>& tensors) {
  if (tensors.empty()) {
    return absl::InvalidArgumentError("the tensor table is empty");
  }
  std::set<std::string> names;
  uint64_t total = 0;
  for (size_t index = 0; index < tensors.size(); ++index) {
    const TensorEntry& tensor = tensors[index];
    if (tensor.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor #", index, " of the table has no name"));
    }
    if (!names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor.name, "' appears twice in the table"));
    }
    absl::StatusOr<uint64_t> bytes = TensorByteSize(tensor.dtype, tensor.shape);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor.name, "': ", bytes.status().message()));
    }
    if (*bytes != tensor.byte_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor.name, "': byte_size ", tensor.byte_size, " does not match its shape ",
          "and dtype (", *bytes, " bytes)"));
    }
    if (tensor.byte_size > kMaxComponentBytes - total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor.name, "' takes the table past ", kMaxComponentBytes,
          " bytes, the largest component ddod holds"));
    }
    total += tensor.byte_size;
  }
  return absl::OkStatus();
}

uint64_t LayOut(std::vector<TensorEntry>& tensors) { return LayOutOnGrid(tensors, 0); }

uint64_t LayOutOnGrid(std::vector<TensorEntry>& tensors, uint64_t grid) {
  // Units in order of first appearance; tensors of a unit in table order.
  std::vector<uint32_t> unit_order;
  std::map<uint32_t, std::vector<TensorEntry*>> members;
  for (TensorEntry& tensor : tensors) {
    auto& list = members[tensor.unit];
    if (list.empty()) {
      unit_order.push_back(tensor.unit);
    }
    list.push_back(&tensor);
  }
  uint64_t cursor = 0;
  for (uint32_t unit : unit_order) {
    cursor = AlignUp(cursor, kUnitAlignment);
    for (TensorEntry* tensor : members[unit]) {
      cursor = AlignUp(cursor, kTensorAlignment);
      // A tensor that would cross a line of the grid and fits in one cell starts the next.
      if (grid != 0 && tensor->byte_size <= grid &&
          (cursor + tensor->byte_size - 1) / grid != cursor / grid) {
        cursor = AlignUp(cursor, grid);
      }
      tensor->offset = cursor;
      cursor += tensor->byte_size;
    }
  }
  return cursor;
}

uint64_t TotalTensorBytes(const std::vector<TensorEntry>& tensors) {
  uint64_t total = 0;
  for (const TensorEntry& tensor : tensors) total += tensor.byte_size;
  return total;
}

uint32_t CountUnits(const std::vector<TensorEntry>& tensors) {
  std::set<uint32_t> units;
  for (const TensorEntry& tensor : tensors) units.insert(tensor.unit);
  return static_cast<uint32_t>(units.size());
}

std::string StructureHash(const std::vector<TensorEntry>& tensors) {
  ContentHasher hasher;
  for (const TensorEntry& tensor : tensors) {
    const std::string record =
        absl::StrCat(tensor.name, kSeparator, SafetensorsDTypeName(tensor.dtype), kSeparator,
                     absl::StrJoin(tensor.shape, ","), kSeparator, tensor.unit, "\n");
    hasher.Update(record.data(), record.size());
  }
  return hasher.Digest();
}

std::string ContentHasher::Digest() const { return "xxh3-64:" + hasher_.HexDigest(); }

std::string ContentHash(const std::vector<TensorEntry>& tensors, const char* base) {
  ContentHasher hasher;
  for (const TensorEntry& tensor : tensors) {
    hasher.Update(base + tensor.offset, tensor.byte_size);
  }
  return hasher.Digest();
}

}  // namespace ddo
