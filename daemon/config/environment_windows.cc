// The process's environment and user on Windows: the wide environment block (UTF-8 here, as
// everywhere in ddod), ddod's own account (number 0, ddo/os/user_ids.h) and %USERPROFILE%.
// There is no XDG on Windows: the default paths come from %LOCALAPPDATA% and %ProgramData%
// once config/paths.cc is ported (docs/windows.md).
#include <windows.h>

#include <string>

#include "daemon/config/environment.h"
#include "ddo/os/user_ids.h"

namespace ddo {
namespace {

std::string Utf8(const wchar_t* text, size_t length) {
  if (length == 0) return std::string();
  const int bytes = ::WideCharToMultiByte(CP_UTF8, 0, text, static_cast<int>(length), nullptr, 0,
                                          nullptr, nullptr);
  std::string out(bytes > 0 ? static_cast<size_t>(bytes) : 0, '\0');
  if (bytes > 0) {
    ::WideCharToMultiByte(CP_UTF8, 0, text, static_cast<int>(length), out.data(), bytes, nullptr,
                          nullptr);
  }
  return out;
}

}  // namespace

Environment ProcessEnvironment() {
  Environment env;
  wchar_t* block = ::GetEnvironmentStringsW();
  if (block == nullptr) return env;
  // NAME=VALUE entries, each ended by a NUL; an empty entry ends the block.
  for (const wchar_t* entry = block; *entry != L'\0';) {
    const size_t length = std::wcslen(entry);
    AddEnvironmentEntry(Utf8(entry, length), env);
    entry += length + 1;
  }
  ::FreeEnvironmentStringsW(block);
  return env;
}

UserContext UserContext::FromProcess(const Environment& env) {
  UserContext user;
  user.uid = os::CurrentUserIds().uid;
  user.home = Lookup(env, "USERPROFILE").value_or("");
  return user;
}

}  // namespace ddo
