// File: daemon/stream/file_read_pool.cc
#include "daemon/stream/file_read_pool.h"

#include <algorithm>
#include <utility>


namespace ddo {

int DefaultFileReadThreads() {
  // 8 read the page cache at about 40 GB/s on the H100 machine, 4 at 27, 16 no faster
  // (bench_file_tier.py, docs/benchmarks.md).
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
}

FileReadPool::FileReadPool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Run(); });
}

FileReadPool::~FileReadPool() { Stop(); }

bool FileReadPool::Submit(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  jobs_.push_back(std::move(job));
  return true;
}

void FileReadPool::Stop() {
  std::deque<std::function<void()>> dropped;  // destroyed outside the lock
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(jobs_);
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

void FileReadPool::Run() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &FileReadPool::HasJobOrStopping));
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace ddo
