// File: client-cpp/src/torch/shared_mapping.cc
#include "client-cpp/src/torch/shared_mapping.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace ddo::detail {

StatusOr<std::shared_ptr<SharedMapping>> SharedMapping::Map(int fd, uint64_t size, MapMode mode,
                                                            const std::string& name) {
  if (size == 0) return std::shared_ptr<SharedMapping>(new SharedMapping(nullptr, 0));
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "cannot stat segment '" + name + "': " + std::strerror(errno));
  }
  if (static_cast<uint64_t>(info.st_size) < size) {
    return Status(StatusCode::kFailedPrecondition,
                  "segment '" + name + "' has " + std::to_string(info.st_size) +
                      " bytes; ddod's answer places " + std::to_string(size));
  }
  int protection = PROT_READ;
  int flags = MAP_SHARED;
  if (mode == MapMode::kCopyOnWrite) {
    protection |= PROT_WRITE;
    flags = MAP_PRIVATE | MAP_NORESERVE;
  } else if (mode == MapMode::kSharedWritable) {
    protection |= PROT_WRITE;
  }
  void* data = mmap(nullptr, size, protection, flags, fd, 0);
  if (data == MAP_FAILED) {
    return Status(StatusCode::kFailedPrecondition,
                  "cannot map segment '" + name + "': " + std::strerror(errno));
  }
  return std::shared_ptr<SharedMapping>(new SharedMapping(static_cast<uint8_t*>(data), size));
}

SharedMapping::~SharedMapping() {
  if (data_ != nullptr) munmap(data_, size_);
}

}  // namespace ddo::detail
