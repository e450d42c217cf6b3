// Reading the configuration file on Windows: one handle, a file on a disk (not a directory,
// a pipe or a device), bounded; errors say what the POSIX reader says.
#include <windows.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/config/config_file.h"
#include "ddo/os/native_handle.h"
#include "ddo/wire/display_text.h"

namespace ddo {
namespace {

std::wstring Wide(const std::string& text) {
  if (text.empty()) return std::wstring();
  const int length = ::MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, text.data(),
                                           static_cast<int>(text.size()), nullptr, 0);
  std::wstring out(length > 0 ? static_cast<size_t>(length) : 0, L'\0');
  if (length > 0) {
    ::MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, text.data(),
                          static_cast<int>(text.size()), out.data(), length);
  }
  return out;
}

absl::Status OpenError(const std::string& path, DWORD error) {
  const std::string what = absl::StrCat("cannot open the configuration file ",
                                        EscapeForDisplay(path), " (error ", error, ")");
  switch (error) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_NAME:
      return absl::NotFoundError(what);
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
      return absl::PermissionDeniedError(what);
    default:
      return absl::UnavailableError(what);
  }
}

}  // namespace

absl::StatusOr<Environment> ReadConfigFile(const std::string& path,
                                           const std::function<bool(absl::string_view)>& known) {
  // Backup semantics: a directory opens too, so that it is named as "not a regular file".
  os::NativeHandle file(::CreateFileW(Wide(path).c_str(), GENERIC_READ,
                                      FILE_SHARE_READ | FILE_SHARE_WRITE, nullptr, OPEN_EXISTING,
                                      FILE_FLAG_BACKUP_SEMANTICS, nullptr));
  if (!file.valid()) return OpenError(path, ::GetLastError());
  BY_HANDLE_FILE_INFORMATION info{};
  if (::GetFileType(file.get()) != FILE_TYPE_DISK ||
      !::GetFileInformationByHandle(file.get(), &info) ||
      (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the configuration file ", EscapeForDisplay(path), " is not a regular file"));
  }
  const uint64_t size = (uint64_t{info.nFileSizeHigh} << 32) | info.nFileSizeLow;
  if (size > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the configuration file ", EscapeForDisplay(path), " has ", size,
                     " bytes, at most ", kMaxConfigFileBytes, " allowed"));
  }
  std::string text(kMaxConfigFileBytes + 1, '\0');
  size_t filled = 0;
  for (;;) {
    DWORD got = 0;
    if (!::ReadFile(file.get(), text.data() + filled, static_cast<DWORD>(text.size() - filled),
                    &got, nullptr)) {
      return absl::UnavailableError(absl::StrCat("cannot read ", EscapeForDisplay(path),
                                                 " (error ", ::GetLastError(), ")"));
    }
    if (got == 0) break;
    filled += got;
    if (filled > kMaxConfigFileBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the configuration file ", EscapeForDisplay(path), " grew past ", kMaxConfigFileBytes,
          " bytes while it was read"));
    }
  }
  text.resize(filled);
  return ParseConfigText(path, text, known);
}

}  // namespace ddo
