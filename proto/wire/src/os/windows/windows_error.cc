#include "windows_error.h"

#include <windows.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddo::os {
namespace {

std::string SystemMessage(uint32_t code) {
  char* text = nullptr;
  const DWORD length = ::FormatMessageA(
      FORMAT_MESSAGE_ALLOCATE_BUFFER | FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS,
      nullptr, code, 0, reinterpret_cast<char*>(&text), 0, nullptr);
  std::string message = length > 0 && text != nullptr ? std::string(text, length) : "";
  if (text != nullptr) ::LocalFree(text);
  while (!message.empty() && (message.back() == '\n' || message.back() == '\r' ||
                              message.back() == ' ' || message.back() == '.')) {
    message.pop_back();
  }
  return message.empty() ? absl::StrFormat("error %u", code)
                         : absl::StrFormat("%s (error %u)", message, code);
}

}  // namespace

absl::Status WindowsError(absl::string_view context, uint32_t code) {
  const std::string message = absl::StrCat(context, ": ", SystemMessage(code));
  switch (code) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_NONE_MAPPED:
      return absl::NotFoundError(message);
    case ERROR_ACCESS_DENIED:
    case ERROR_PRIVILEGE_NOT_HELD:
      return absl::PermissionDeniedError(message);
    case ERROR_ALREADY_EXISTS:
    case ERROR_FILE_EXISTS:
      return absl::AlreadyExistsError(message);
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
    case ERROR_COMMITMENT_LIMIT:
    case ERROR_DISK_FULL:
      return absl::ResourceExhaustedError(message);
    case ERROR_INVALID_PARAMETER:
    case ERROR_INVALID_NAME:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

std::wstring Widen(absl::string_view text) {
  if (text.empty()) return std::wstring();
  const int length = ::MultiByteToWideChar(CP_UTF8, 0, text.data(),
                                           static_cast<int>(text.size()), nullptr, 0);
  std::wstring wide(static_cast<size_t>(length), L'\0');
  ::MultiByteToWideChar(CP_UTF8, 0, text.data(), static_cast<int>(text.size()), wide.data(),
                        length);
  return wide;
}

std::string Narrow(const std::wstring& text) {
  if (text.empty()) return std::string();
  const int length = ::WideCharToMultiByte(CP_UTF8, 0, text.data(), static_cast<int>(text.size()),
                                           nullptr, 0, nullptr, nullptr);
  std::string narrow(static_cast<size_t>(length), '\0');
  ::WideCharToMultiByte(CP_UTF8, 0, text.data(), static_cast<int>(text.size()), narrow.data(),
                        length, nullptr, nullptr);
  return narrow;
}

}  // namespace ddo::os
