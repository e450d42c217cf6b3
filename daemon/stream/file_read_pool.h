// File: daemon/stream/file_read_pool.h
//
// The threads that read file-tier units from their backing files into staging buffers
// (docs/architecture.md §6, the file tier), so that the device's copy worker never waits on a
// file: it hands a unit's reads here, in chunks that the threads take in turn (a large unit is
// read by several at once), and copies the unit once its reads are done. Jobs run in the order
// they came; each session has at most as many units in flight as it has staging buffers,
// which keeps one session from taking every thread for long.
//
// Thread-safety: Submit() may be called from any thread. Stop() (and the destructor) drops
// the jobs not started and waits for those running.
#ifndef DDO_DAEMON_STREAM_FILE_READ_POOL_H_
#define DDO_DAEMON_STREAM_FILE_READ_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ddo {

// The read threads when DDO_FILE_READ_THREADS is not set: the CPUs, at least 2 and at most 8.
int DefaultFileReadThreads();

class FileReadPool {
 public:
  explicit FileReadPool(int threads);
  FileReadPool(const FileReadPool&) = delete;
  FileReadPool& operator=(const FileReadPool&) = delete;
  ~FileReadPool();

  // Runs `job` on one of the threads; false (and `job` dropped) once stopped.
  bool Submit(std::function<void()> job);
  void Stop();
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Run();
  bool HasJobOrStopping() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || !jobs_.empty();
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_FILE_READ_POOL_H_
