// File: daemon/store/safetensors_for_test.h
//
// Tests only: writes a safetensors file of U8 tensors with given bytes, and opens it as a
// client would (a descriptor of its own, the file's name for messages).
//
// Thread-safety: tests only; plain functions of their arguments.
#ifndef DDO_DAEMON_STORE_SAFETENSORS_FOR_TEST_H_
#define DDO_DAEMON_STORE_SAFETENSORS_FOR_TEST_H_

#include <fcntl.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "daemon/store/safetensors.h"
#include "ddo/wire/unique_fd.h"

namespace ddo {

// `tensors`: (name, bytes) in file order, each a U8 tensor of its bytes' length. Returns
// false when the file could not be written.
inline bool WriteU8Safetensors(const std::string& path,
                               const std::vector<std::pair<std::string, std::string>>& tensors) {
  std::string header = "{";
  std::string data;
  for (const auto& [name, bytes] : tensors) {
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(bytes.size()) +
              "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + bytes.size()) + "]}";
    data += bytes;
  }
  header += "}";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string file_bytes(8, '\0');
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) file_bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  file_bytes += header;
  file_bytes += data;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return false;
  const bool written = std::fwrite(file_bytes.data(), 1, file_bytes.size(), file) ==
                       file_bytes.size();
  return std::fclose(file) == 0 && written;
}

// A client's source: its own read-only descriptor of `path`, named `path`.
inline SafetensorsSource SourceOf(const std::string& path) {
  return SafetensorsSource{path, UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC))};
}

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SAFETENSORS_FOR_TEST_H_
