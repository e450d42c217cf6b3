#include "ddo/os/shared_memory.h"

// clang-format off
#include <windows.h>
#include <sddl.h>
// clang-format on

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "../segment_name.h"
#include "windows_error.h"

namespace ddo::os {
namespace {

std::wstring KernelName(const std::string& name, bool global_namespace) {
  return Widen(absl::StrCat(global_namespace ? "Global\\" : "Local\\", name));
}

// A SID as SDDL text ("S-1-5-21-...").
absl::StatusOr<std::wstring> SidText(PSID sid) {
  wchar_t* text = nullptr;
  if (!::ConvertSidToStringSidW(sid, &text)) {
    return WindowsError("write a SID as text", ::GetLastError());
  }
  std::wstring result(text);
  ::LocalFree(text);
  return result;
}

// The SID of the account this process runs as.
absl::StatusOr<std::wstring> ProcessUserSid() {
  HANDLE raw_token = nullptr;
  if (!::OpenProcessToken(::GetCurrentProcess(), TOKEN_QUERY, &raw_token)) {
    return WindowsError("open this process's token", ::GetLastError());
  }
  NativeHandle token(raw_token);
  DWORD bytes = 0;
  ::GetTokenInformation(token.get(), TokenUser, nullptr, 0, &bytes);
  std::vector<unsigned char> buffer(bytes);
  if (bytes == 0 ||
      !::GetTokenInformation(token.get(), TokenUser, buffer.data(), bytes, &bytes)) {
    return WindowsError("read this process's user", ::GetLastError());
  }
  return SidText(reinterpret_cast<TOKEN_USER*>(buffer.data())->User.Sid);
}

absl::StatusOr<std::wstring> GroupSid(const std::string& group) {
  const std::wstring wide = Widen(group);
  DWORD sid_bytes = 0;
  DWORD domain_chars = 0;
  SID_NAME_USE use;
  ::LookupAccountNameW(nullptr, wide.c_str(), nullptr, &sid_bytes, nullptr, &domain_chars, &use);
  if (sid_bytes == 0) {
    return WindowsError(absl::StrCat("look up group ", group), ::GetLastError());
  }
  std::vector<unsigned char> sid(sid_bytes);
  std::vector<wchar_t> domain(domain_chars + 1);
  if (!::LookupAccountNameW(nullptr, wide.c_str(), sid.data(), &sid_bytes, domain.data(),
                            &domain_chars, &use)) {
    return WindowsError(absl::StrCat("look up group ", group), ::GetLastError());
  }
  return SidText(sid.data());
}

struct LocalFreeDeleter {
  void operator()(void* memory) const { ::LocalFree(memory); }
};
using SecurityDescriptor = std::unique_ptr<void, LocalFreeDeleter>;

// A protected DACL (no inherited entries) granting the creator everything and the group, when
// given, read and write; no one else has an entry, so no one else gets in.
absl::StatusOr<SecurityDescriptor> OwnerOnlyDescriptor(const SegmentAccess& access) {
  absl::StatusOr<std::wstring> user = ProcessUserSid();
  if (!user.ok()) return user.status();
  std::wstring sddl = L"D:P(A;;GA;;;" + *user + L")";
  if (access.group.has_value()) {
    absl::StatusOr<std::wstring> group = GroupSid(*access.group);
    if (!group.ok()) return group.status();
    sddl += L"(A;;GRGW;;;" + *group + L")";
  }
  PSECURITY_DESCRIPTOR descriptor = nullptr;
  if (!::ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl.c_str(), SDDL_REVISION_1,
                                                              &descriptor, nullptr)) {
    return WindowsError("build a segment's security descriptor", ::GetLastError());
  }
  return SecurityDescriptor(descriptor);
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
  absl::StatusOr<SecurityDescriptor> descriptor = OwnerOnlyDescriptor(access);
  if (!descriptor.ok()) return descriptor.status();
  SECURITY_ATTRIBUTES attributes{sizeof(SECURITY_ATTRIBUTES), descriptor->get(), FALSE};
  const std::wstring kernel_name = KernelName(name, access.global_namespace);
  NativeHandle mapping(::CreateFileMappingW(
      INVALID_HANDLE_VALUE, &attributes, PAGE_READWRITE | SEC_COMMIT,
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
