// File: daemon/common/temp_dir_for_test.h
//
// Tests only: a private directory under /tmp (short paths: Unix socket paths are limited to
// 107 bytes; on Windows under the user's temporary directory), removed with everything in it
// when the object goes away.
//
// Thread-safety: tests only; one test thread owns each directory.
#ifndef DDO_DAEMON_COMMON_TEMP_DIR_FOR_TEST_H_
#define DDO_DAEMON_COMMON_TEMP_DIR_FOR_TEST_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "daemon/common/random_id.h"

namespace ddo {

class TempDirForTest {
 public:
  TempDirForTest() {
#ifdef _WIN32
    // Windows has no mkdtemp: a random name in the user's temporary directory.
    std::error_code error;
    const std::filesystem::path made =
        std::filesystem::temp_directory_path(error) / ("ddo-test-" + RandomId().substr(0, 12));
    path_ = std::filesystem::create_directory(made, error) ? made.generic_string() : "";
#else
    char pattern[] = "/tmp/ddo-test-XXXXXX";
    path_ = ::mkdtemp(pattern) != nullptr ? pattern : "";
#endif
  }
  TempDirForTest(const TempDirForTest&) = delete;
  TempDirForTest& operator=(const TempDirForTest&) = delete;
  ~TempDirForTest() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_TEMP_DIR_FOR_TEST_H_
