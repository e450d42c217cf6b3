// File: proto/wire/include/ddo/wire/unique_fd.h
//
// UniqueFd owns one file descriptor and closes it when destroyed. Move-only.
//
// Thread-safety: a UniqueFd is used by one thread at a time, as any move-only owner; the
// descriptor it holds may be used from any thread.
#ifndef DDO_WIRE_UNIQUE_FD_H_
#define DDO_WIRE_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace ddo {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset(std::exchange(other.fd_, -1));
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Gives up ownership: the caller closes the descriptor (or hands it to one that does).
  int Release() { return std::exchange(fd_, -1); }

  void Reset(int fd = -1) {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace ddo

#endif  // DDO_WIRE_UNIQUE_FD_H_
