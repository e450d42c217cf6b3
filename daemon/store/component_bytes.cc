// File: daemon/store/component_bytes.cc
#include "daemon/store/component_bytes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/store/direct_reader.h"

namespace ddo {

const std::shared_ptr<PoolSegment>& ComponentBytes::own() const {
  static const std::shared_ptr<PoolSegment> kNone;
  return segments_.empty() ? kNone : segments_.front();
}

bool ComponentBytes::AllPinned() const {
  for (const auto& segment : segments_) {
    if (segment == nullptr || !segment->pinned()) return false;
  }
  return !segments_.empty();
}

absl::Status ComponentBytes::ReadTensor(size_t index, char* dst, FileSystem* fs) const {
  if (!InFile(index)) {
    return absl::FailedPreconditionError(absl::StrCat("tensor ", index, " is not in a file"));
  }
  const FileRange& range = files_->ranges()[index];
  return ReadRange(files_->FileOf(range), range, dst, fs);
}

absl::Status ComponentBytes::ReadRanges(const std::vector<FileRange>& ranges, char* dst,
                                        FileSystem* fs) const {
  if (files_ == nullptr) {
    return absl::FailedPreconditionError("the component has no backing files");
  }
  for (const FileRange& range : ranges) {
    if (range.file >= files_->files().size()) {
      return absl::InvalidArgumentError(absl::StrCat("no backing file ", range.file));
    }
    DDO_RETURN_IF_ERROR(ReadRange(files_->FileOf(range), range, dst, fs));
    dst += range.bytes;
  }
  return absl::OkStatus();
}

std::string OwnContentHash(const std::vector<TensorEntry>& tensors, const ComponentBytes& bytes,
                           WorkProgress* progress) {
  // In steps, so that a reporter sees a big tensor's bytes go by.
  constexpr uint64_t kStep = 64ull << 20;
  ContentHasher hasher;
  for (const TensorEntry& tensor : tensors) {
    if (tensor.segment != 0) continue;
    const char* data = bytes.DataOf(tensor);
    for (uint64_t done = 0; done < tensor.byte_size; done += kStep) {
      const uint64_t step = std::min(kStep, tensor.byte_size - done);
      hasher.Update(data + done, step);
      if (progress != nullptr) progress->Add(step);
    }
  }
  return hasher.Digest();
}

}  // namespace ddo
