// File: daemon/store/spill_ledger.h
//
// The spill budget (docs/configuration.md, --spill-budget-gb and --max-user-spill-gb): how
// many bytes of spill files ddod keeps on disk, in all and per uid. A spill takes a Charge
// before it writes; the charge goes back when the component it belongs to is gone (RAII).
//
// Thread-safety: Take may be called from any thread; a Charge may be destroyed on
// any thread (mu_ guards the counts).
#ifndef DDO_DAEMON_STORE_SPILL_LEDGER_H_
#define DDO_DAEMON_STORE_SPILL_LEDGER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ddo {

class SpillLedger {
 public:
  // `budget`: bytes in all (0: no spilling); `per_uid`: bytes one uid may hold (0: the budget).
  SpillLedger(uint64_t budget, uint64_t per_uid);
  SpillLedger(const SpillLedger&) = delete;
  SpillLedger& operator=(const SpillLedger&) = delete;

  class Charge {
   public:
    Charge(SpillLedger* ledger, uid_t uid, uint64_t bytes)
        : ledger_(ledger), uid_(uid), bytes_(bytes) {}
    Charge(const Charge&) = delete;
    Charge& operator=(const Charge&) = delete;
    ~Charge() { ledger_->Return(uid_, bytes_); }
    uint64_t bytes() const { return bytes_; }

   private:
    SpillLedger* ledger_;
    uid_t uid_;
    uint64_t bytes_;
  };

  bool enabled() const { return budget_ > 0; }
  // `bytes` for `uid`; ResourceExhausted (saying which bound) when they do not fit. The
  // ledger must outlive the charge.
  absl::StatusOr<std::shared_ptr<Charge>> Take(uid_t uid, uint64_t bytes);

 private:
  void Return(uid_t uid, uint64_t bytes);

  const uint64_t budget_;
  const uint64_t per_uid_;
  absl::Mutex mu_;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uid_t, uint64_t> by_uid_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SPILL_LEDGER_H_
