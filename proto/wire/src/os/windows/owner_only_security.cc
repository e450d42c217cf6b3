// clang-format off
#include "owner_only_security.h"

#include <sddl.h>
// clang-format on

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "windows_error.h"

namespace ddo::os {
namespace {

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
  return TokenUserSid(token.get());
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

}  // namespace

absl::StatusOr<std::wstring> TokenUserSid(HANDLE token) {
  DWORD bytes = 0;
  ::GetTokenInformation(token, TokenUser, nullptr, 0, &bytes);
  std::vector<unsigned char> buffer(bytes);
  if (bytes == 0 || !::GetTokenInformation(token, TokenUser, buffer.data(), bytes, &bytes)) {
    return WindowsError("read a token's user", ::GetLastError());
  }
  return SidText(reinterpret_cast<TOKEN_USER*>(buffer.data())->User.Sid);
}

OwnerOnlySecurity::OwnerOnlySecurity(void* descriptor) : descriptor_(descriptor) {
  attributes_.nLength = sizeof(SECURITY_ATTRIBUTES);
  attributes_.lpSecurityDescriptor = descriptor_.get();
  attributes_.bInheritHandle = FALSE;
}

absl::StatusOr<OwnerOnlySecurity> OwnerOnlySecurity::Make(const SegmentAccess& access) {
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
    return WindowsError("build an owner-only security descriptor", ::GetLastError());
  }
  return OwnerOnlySecurity(descriptor);
}

}  // namespace ddo::os
