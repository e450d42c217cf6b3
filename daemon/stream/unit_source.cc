// File: daemon/stream/unit_source.cc
#include "daemon/stream/unit_source.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"

namespace ddo {

absl::StatusOr<std::unique_ptr<StagingBuffers>> StagingFor(const ComponentBytes& host,
                                                           const SessionPlan& plan, bool pin,
                                                           HostPool* ram) {
  if (host.files() == nullptr || plan.units.empty() || plan.slot_bytes == 0) {
    return std::unique_ptr<StagingBuffers>();
  }
  return StagingBuffers::Create(kFileStagingBuffers, plan.slot_bytes, pin, ram);
}

bool UnitSource::InFiles(const StreamUnit& unit) const {
  for (const PlannedTensor& placed : unit.tensors) {
    if (host_.InFile(placed.table_index)) return true;
  }
  return false;
}

absl::StatusOr<std::optional<UnitSource::Staged>> UnitSource::Stage(
    const StreamUnit& unit, const std::vector<TensorEntry>& tensors) {
  if (!InFiles(unit)) return std::optional<Staged>(Staged{});
  if (staging_ == nullptr || unit.span_bytes > staging_->buffer_bytes()) {
    return absl::InternalError(absl::StrCat("a unit of ", unit.span_bytes,
                                            " bytes has no staging buffer to be read into"));
  }
  const std::optional<uint32_t> buffer = staging_->Acquire();
  if (!buffer) return std::optional<Staged>();
  char* image = staging_->data(*buffer);
  if (absl::Status read = ReadImage(unit, tensors, image); !read.ok()) {
    staging_->Release(*buffer);
    return read;
  }
  return std::optional<Staged>(Staged{buffer, image});
}

absl::Status UnitSource::ReadImage(const StreamUnit& unit,
                                   const std::vector<TensorEntry>& tensors, char* image) {
  for (const PlannedTensor& placed : unit.tensors) {
    const TensorEntry& tensor = tensors[placed.table_index];
    if (tensor.byte_size == 0) continue;
    char* destination = image + placed.offset;
    if (!host_.InFile(placed.table_index)) {
      std::memcpy(destination, host_.DataOf(tensor), tensor.byte_size);
      continue;
    }
    if (absl::Status read = host_.ReadTensor(placed.table_index, destination); !read.ok()) {
      return absl::Status(read.code(),
                          absl::StrCat("reading '", tensor.name, "': ", read.message()));
    }
    file_bytes_read_ += tensor.byte_size;
  }
  return absl::OkStatus();
}

void UnitSource::Release(const Staged& staged) {
  if (staged.buffer && staging_ != nullptr) staging_->Release(*staged.buffer);
}

}  // namespace ddo
