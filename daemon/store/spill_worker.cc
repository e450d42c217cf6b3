// File: daemon/store/spill_worker.cc
#include "daemon/store/spill_worker.h"

namespace ddo {

void SpillWorker::Enqueue(uid_t uid, const std::string& cache_key) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || !queued_.insert({uid, cache_key}).second) return;
  queue_.emplace_back(uid, cache_key);
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
}

void SpillWorker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cancelled_.store(true);
    queue_.clear();
    queued_.clear();
  }
  if (thread_.joinable()) thread_.join();
}

void SpillWorker::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](SpillWorker* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return self->queue_.empty() && !self->running_;
      },
      this));
}

void SpillWorker::Run() {
  for (;;) {
    std::pair<uid_t, std::string> next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SpillWorker* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (stopping_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    job_(next.first, next.second, [this] { return cancelled_.load(); });
    absl::MutexLock lock(&mu_);
    queued_.erase(next);
    running_ = false;
  }
}

}  // namespace ddo
