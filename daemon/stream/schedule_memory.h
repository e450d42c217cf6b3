// File: daemon/stream/schedule_memory.h
//
// What ddod learned from the runners of each component, for its next sessions: the unit order
// of each plan (a session that finds it streams from its first use instead of learning it) and
// the rows each Linear computed in the last learning forward (the planner chooses the resident
// set with them: session_plan.h, WeightRows). Kept per owner uid and cache key, as the keys are
// (ComponentStore), in ddod's memory only: a restarted ddod learns them again.
//
// Thread-safety: every method may be called from any thread (one internal mutex).
#ifndef DDO_DAEMON_STREAM_SCHEDULE_MEMORY_H_
#define DDO_DAEMON_STREAM_SCHEDULE_MEMORY_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/layout/tensor_table.h"
#include "daemon/layout/session_plan.h"

namespace ddo {

// A component as the memory names it: its owner's uid, its key and its root base's key (empty
// when it is not a derived version).
struct ComponentName {
  uid_t owner_uid = 0;
  std::string cache_key;
  std::string base_cache_key;
};

struct KnownSchedule {
  std::vector<uint32_t> order;  // empty: none known
  bool from_base = false;       // learned by the runners of the root base
};

class ScheduleMemory {
 public:
  // The order last set for `component` under the plan `signature`; for a derived version
  // without one of its own, its root base's (the same units).
  KnownSchedule Known(const ComponentName& component, const std::string& signature) const;
  // Replaces the order of `component` (its own key) under `signature`.
  void RememberSchedule(const ComponentName& component, const std::string& signature,
                        std::vector<uint32_t> order);

  // The rows of `component`'s last learning forward (its root base's when it has none).
  WeightRows LearnedRows(const ComponentName& component) const;
  // Keeps the entries of `rows` that name one of `tensors` (so that what is kept per component
  // is bounded by its table, whatever a runner sends); nothing when none does.
  void RememberRows(const ComponentName& component, const std::vector<TensorEntry>& tensors,
                    const WeightRows& rows);

 private:
  mutable absl::Mutex mu_;
  // "<uid>:<cache key>/<plan signature>" -> the unit order.
  std::map<std::string, std::vector<uint32_t>> schedules_ ABSL_GUARDED_BY(mu_);
  // "<uid>:<cache key>" -> the rows (any plan: the planner uses them to choose the next one).
  std::map<std::string, WeightRows> rows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_SCHEDULE_MEMORY_H_
