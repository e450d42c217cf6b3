// File: daemon/stream/pool_prefetcher.cc
#include "daemon/stream/pool_prefetcher.h"

#include <utility>

#include "daemon/common/format_bytes.h"
#include "daemon/common/logging.h"
#include "ddo/wire/display_text.h"

namespace ddo {

PoolPrefetcher::PoolPrefetcher(ComponentStore& store) : store_(store) {}

PoolPrefetcher::~PoolPrefetcher() { Stop(); }

void PoolPrefetcher::Start(const std::string& lease_id, const Caller& caller,
                           std::vector<std::string> keys) {
  absl::MutexLock lock(&mu_);
  CancelLocked(lease_id);
  if (stopping_ || keys.empty()) return;
  queue_.push_back(Job{lease_id, caller, std::move(keys), std::make_shared<std::atomic<bool>>(false)});
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
}

void PoolPrefetcher::CancelLease(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  CancelLocked(lease_id);
}

void PoolPrefetcher::CancelLeaseAndWait(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  CancelLocked(lease_id);
  struct Args {
    PoolPrefetcher* self;
    const std::string* lease_id;
  } args{this, &lease_id};
  mu_.Await(absl::Condition(
      +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return a->self->running_ == nullptr || a->self->running_->lease_id != *a->lease_id;
      },
      &args));
}

void PoolPrefetcher::CancelLocked(const std::string& lease_id) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    it = it->lease_id == lease_id ? queue_.erase(it) : it + 1;
  }
  if (running_ != nullptr && running_->lease_id == lease_id) running_->cancelled->store(true);
}

void PoolPrefetcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    if (running_ != nullptr) running_->cancelled->store(true);
  }
  if (thread_.joinable()) thread_.join();
}

void PoolPrefetcher::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](PoolPrefetcher* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return self->queue_.empty() && self->running_ == nullptr;
      },
      this));
}

void PoolPrefetcher::Run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PoolPrefetcher* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (stopping_) return;
      job = std::make_shared<Job>(std::move(queue_.front()));
      queue_.pop_front();
      running_ = job;
    }
    RunJob(*job);
    absl::MutexLock lock(&mu_);
    running_ = nullptr;
  }
}

void PoolPrefetcher::RunJob(const Job& job) {
  auto log = Logger("stream");
  for (const std::string& key : job.keys) {
    if (job.cancelled->load()) return;
    absl::StatusOr<uint64_t> moved =
        store_.Promote(key, job.caller, [&] { return job.cancelled->load(); });
    if (moved.ok()) {
      if (*moved > 0) {
        log->info("phase prefetch: '{}' of {}: {} read back into the pool",
                  EscapeForDisplay(key), job.caller.Describe(), FormatBytes(*moved));
      }
    } else {
      log->info("phase prefetch: '{}' of {} stays in its files: {}", EscapeForDisplay(key),
                job.caller.Describe(), moved.status().message());
    }
  }
}

}  // namespace ddo
