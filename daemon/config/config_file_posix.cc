// Reading the configuration file on POSIX: one descriptor, a regular file, bounded.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "daemon/config/config_file.h"
#include "ddo/wire/display_text.h"
#include "ddo/wire/posix_error.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

absl::StatusOr<Environment> ReadConfigFile(const std::string& path,
                                           const std::function<bool(absl::string_view)>& known) {
  // O_NONBLOCK: a FIFO put in the file's place must not block ddod's start or its reload.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) {
    const int error = errno;
    return PosixError(absl::StrCat("cannot open the configuration file ",
                                   EscapeForDisplay(path)),
                      error);
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return PosixError(absl::StrCat("cannot stat ", EscapeForDisplay(path)), errno);
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the configuration file ", EscapeForDisplay(path), " is not a regular file"));
  }
  if (static_cast<size_t>(info.st_size) > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the configuration file ", EscapeForDisplay(path), " has ", info.st_size,
                     " bytes, at most ", kMaxConfigFileBytes, " allowed"));
  }
  std::string text(kMaxConfigFileBytes + 1, '\0');
  size_t filled = 0;
  for (;;) {
    const ssize_t got = ::read(fd.get(), text.data() + filled, text.size() - filled);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return PosixError(absl::StrCat("cannot read ", EscapeForDisplay(path)), errno);
    if (got == 0) break;
    filled += static_cast<size_t>(got);
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
