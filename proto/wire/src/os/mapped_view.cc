// MappedView's moves and destructor, the same on both systems; Reset, which unmaps, is each
// system's (posix/ and windows/shared_memory.cc).
#include "ddo/os/shared_memory.h"

namespace ddo::os {

MappedView::MappedView(MappedView&& other) noexcept
    : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedView& MappedView::operator=(MappedView&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedView::~MappedView() { Reset(); }

}  // namespace ddo::os
