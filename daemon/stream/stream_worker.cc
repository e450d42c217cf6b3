// File: daemon/stream/stream_worker.cc
#include "daemon/stream/stream_worker.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>

#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"

namespace ddo {
namespace {

// The longest sleep: bounds the delay of a ring lost to a race (docs/streaming.md §3).
constexpr absl::Duration kMaxSleep = absl::Milliseconds(1);
// Passes without work before sleeping: runners usually free a slot within microseconds.
constexpr int kIdlePassesBeforeSleep = 64;
// While copies or kernels run, completion is polled this often (timer slack lowered to match).
constexpr auto kDevicePollInterval = std::chrono::microseconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<StreamWorker>> StreamWorker::Start(std::string device,
                                                                  const std::string& doorbell_name) {
  DDO_ASSIGN_OR_RETURN(Doorbell doorbell, Doorbell::Create(doorbell_name));
  std::unique_ptr<StreamWorker> worker(new StreamWorker(std::move(device), std::move(doorbell)));
  worker->thread_ = std::thread([raw = worker.get()] { raw->Run(); });
  return worker;
}

StreamWorker::StreamWorker(std::string device, Doorbell doorbell)
    : device_(std::move(device)), doorbell_(std::move(doorbell)) {}

StreamWorker::~StreamWorker() {
  stopping_.store(true);
  doorbell_.Ring();
  if (thread_.joinable()) thread_.join();
}

void StreamWorker::Add(std::shared_ptr<StreamSession> session) {
  {
    absl::MutexLock lock(&mu_);
    sessions_.push_back(std::move(session));
    ++generation_;
  }
  doorbell_.Ring();
}

void StreamWorker::Remove(const std::string& session_id) {
  {
    absl::MutexLock lock(&mu_);
    sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                   [&](const auto& s) { return s->id() == session_id; }),
                    sessions_.end());
    ++generation_;
  }
  doorbell_.Ring();
  // The worker's current pass may still use the session; wait for it to end, then let go.
  absl::MutexLock pass(&pass_mu_);
  snapshot_.erase(std::remove_if(snapshot_.begin(), snapshot_.end(),
                                 [&](const auto& s) { return s->id() == session_id; }),
                  snapshot_.end());
}

size_t StreamWorker::session_count() {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

void StreamWorker::Run() {
  Logger("stream")->debug("copy worker for {} started", device_);
  ::prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us: the poll interval above is meant literally
  uint64_t seen_generation = ~0ull;
  size_t first = 0;  // rotates, so no session always goes first
  int idle_passes = 0;
  while (!stopping_.load()) {
    bool worked = false;
    bool device_busy = false;  // copies or the runners' kernels still running: poll
    {
      absl::MutexLock pass(&pass_mu_);
      {
        absl::MutexLock lock(&mu_);
        if (generation_ != seen_generation) {
          snapshot_ = sessions_;
          seen_generation = generation_;
        }
      }
      const auto& sessions = snapshot_;
      for (size_t i = 0; i < sessions.size(); ++i) {
        switch (sessions[(first + i) % sessions.size()]->Step()) {
          case StreamSession::StepResult::kWorked:
            worked = true;
            break;
          case StreamSession::StepResult::kWaitingOnDevice:
            device_busy = true;
            break;
          case StreamSession::StepResult::kIdle:
            break;
        }
      }
      if (!sessions.empty()) first = (first + 1) % sessions.size();
    }
    if (worked) {
      idle_passes = 0;
      continue;
    }
    if (device_busy) {
      // Nothing rings when the GPU finishes: poll, gently.
      std::this_thread::sleep_for(kDevicePollInterval);
      continue;
    }
    if (++idle_passes < kIdlePassesBeforeSleep) {
      std::this_thread::yield();
      continue;
    }
    idle_passes = 0;
    bool none;
    {
      absl::MutexLock pass(&pass_mu_);
      none = snapshot_.empty();
    }
    // Without sessions nothing can be lost: Add() rings.
    doorbell_.Sleep(none ? absl::Seconds(1) : kMaxSleep, [&] {
      if (stopping_.load()) return true;
      absl::MutexLock pass(&pass_mu_);
      {
        absl::MutexLock lock(&mu_);
        if (generation_ != seen_generation) return true;
      }
      for (const auto& session : snapshot_) {
        if (session->HasWork()) return true;
      }
      return false;
    });
  }
  Logger("stream")->debug("copy worker for {} stopped", device_);
}

}  // namespace ddo
