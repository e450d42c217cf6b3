// File: daemon/common/background_queue.cc
#include "daemon/common/background_queue.h"

#include <utility>

namespace ddo {

bool BackgroundQueue::Enqueue(std::string key, Work work) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  if (running_ != nullptr && running_->key == key && !running_->cancelled->load()) return false;
  for (const Job& queued : queue_) {
    if (queued.key == key) return false;
  }
  queue_.push_back(Job{std::move(key), std::move(work)});
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  return true;
}

void BackgroundQueue::CancelLocked(const KeyMatch& matches) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    it = matches(it->key) ? queue_.erase(it) : it + 1;
  }
  if (running_ != nullptr && matches(running_->key)) running_->cancelled->store(true);
}

void BackgroundQueue::Cancel(const KeyMatch& matches) {
  absl::MutexLock lock(&mu_);
  CancelLocked(matches);
}

void BackgroundQueue::CancelAndWait(const KeyMatch& matches) {
  absl::MutexLock lock(&mu_);
  CancelLocked(matches);
  struct Args {
    BackgroundQueue* self;
    const KeyMatch* matches;
  } args{this, &matches};
  mu_.Await(absl::Condition(
      +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return a->self->running_ == nullptr || !(*a->matches)(a->self->running_->key);
      },
      &args));
}

void BackgroundQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    if (running_ != nullptr) running_->cancelled->store(true);
  }
  if (thread_.joinable()) thread_.join();
}

void BackgroundQueue::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](BackgroundQueue* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return self->queue_.empty() && self->running_ == nullptr;
      },
      this));
}

void BackgroundQueue::Run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](BackgroundQueue* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (stopping_) return;
      job = std::make_shared<Job>(std::move(queue_.front()));
      queue_.pop_front();
      running_ = job;
    }
    const std::shared_ptr<std::atomic<bool>> cancelled = job->cancelled;
    job->work([&cancelled] { return cancelled->load(); });
    absl::MutexLock lock(&mu_);
    running_ = nullptr;
  }
}

}  // namespace ddo
