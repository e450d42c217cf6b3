#include "ddo/os/shared_memory.h"

#include <windows.h>

#include "absl/strings/str_cat.h"
#include "../segment_name.h"
#include "owner_only_security.h"
#include "windows_error.h"

namespace ddo::os {
namespace {

std::wstring KernelName(const std::string& name, bool global_namespace) {
  return Widen(absl::StrCat(global_namespace ? "Global\\" : "Local\\", name));
}

// The size of a mapping: its view's region, whole pages (Windows keeps no exact size).
absl::StatusOr<uint64_t> MappedSize(HANDLE mapping, const std::string& name) {
  void* view = ::MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
  if (view == nullptr) return WindowsError(absl::StrCat("map ", name), ::GetLastError());
  MEMORY_BASIC_INFORMATION region{};
  const SIZE_T described = ::VirtualQuery(view, &region, sizeof(region));
  ::UnmapViewOfFile(view);
  if (described == 0) return WindowsError(absl::StrCat("size ", name), ::GetLastError());
  return static_cast<uint64_t>(region.RegionSize);
}

}  // namespace

// The system half of MappedView (mapped_view.cc has the rest).
void MappedView::Reset() {
  if (data_ != nullptr) ::UnmapViewOfFile(data_);
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<SharedMemory> SharedMemory::Create(const std::string& name, uint64_t bytes,
                                                  const SegmentAccess& access) {
  if (absl::Status valid = CheckNewSegment(name, bytes); !valid.ok()) return valid;
  absl::StatusOr<OwnerOnlySecurity> security = OwnerOnlySecurity::Make(access);
  if (!security.ok()) return security.status();
  const std::wstring kernel_name = KernelName(name, access.global_namespace);
  NativeHandle mapping(::CreateFileMappingW(
      INVALID_HANDLE_VALUE, security->attributes(), PAGE_READWRITE | SEC_COMMIT,
      static_cast<DWORD>(bytes >> 32), static_cast<DWORD>(bytes & 0xffffffffu),
      kernel_name.c_str()));
  const DWORD error = ::GetLastError();
  if (!mapping.valid()) {
    return WindowsError(absl::StrCat("create shared memory ", name), error);
  }
  // CreateFileMappingW opens an existing mapping of that name instead of failing: never use
  // someone else's segment.
  if (error == ERROR_ALREADY_EXISTS) {
    return absl::AlreadyExistsError(absl::StrCat("shared memory ", name, " exists already"));
  }
  return SharedMemory(name, std::move(mapping), bytes, /*writable=*/true);
}

absl::StatusOr<SharedMemory> SharedMemory::Open(const std::string& name, bool writable,
                                                bool global_namespace) {
  if (absl::Status valid = CheckSegmentName(name); !valid.ok()) return valid;
  const std::wstring kernel_name = KernelName(name, global_namespace);
  NativeHandle mapping(::OpenFileMappingW(FILE_MAP_READ | (writable ? FILE_MAP_WRITE : 0),
                                          FALSE, kernel_name.c_str()));
  if (!mapping.valid()) {
    return WindowsError(absl::StrCat("open shared memory ", name), ::GetLastError());
  }
  absl::StatusOr<uint64_t> size = MappedSize(mapping.get(), name);
  if (!size.ok()) return size.status();
  return SharedMemory(name, std::move(mapping), *size, writable);
}

absl::Status SharedMemory::Remove(const std::string& name) {
  return CheckSegmentName(name);  // the name goes with the last handle
}

absl::StatusOr<MappedView> SharedMemory::Map(bool writable) const {
  if (writable && !writable_) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name_, " was opened read-only"));
  }
  void* data = ::MapViewOfFile(handle_.get(), writable ? FILE_MAP_WRITE : FILE_MAP_READ, 0, 0,
                               static_cast<SIZE_T>(size_));
  if (data == nullptr) {
    return WindowsError(absl::StrCat("map shared memory ", name_), ::GetLastError());
  }
  return MappedView(data, size_);
}

}  // namespace ddo::os
