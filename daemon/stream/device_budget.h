// File: daemon/stream/device_budget.h
//
// ddod's own memory budget on each streaming device (DDO_VRAM_BUDGET_GB for a GPU, the RAM
// budget for a host device): the bytes its sessions' slabs and rings and its warm slabs hold.
// Bytes are taken as a Reservation, which gives them back when it is destroyed, so that no
// error path can leak a reservation or give one back twice. A host device's bytes are RAM: they
// are also counted in the host pool's budget (HostPool::TryHold), the one RAM budget of ddod.
//
// Thread-safety: DeviceBudget is thread-safe. A Reservation belongs to one owner at a time;
// it must not outlive its DeviceBudget. Under its lock DeviceBudget calls nothing but the host
// pool's TryHold and ReleaseHold, which take only the pool's own leaf lock, so a caller may hold
// its own lock while reserving or releasing.
#ifndef DDO_DAEMON_STREAM_DEVICE_BUDGET_H_
#define DDO_DAEMON_STREAM_DEVICE_BUDGET_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/pool/host_pool.h"

namespace ddo {

class DeviceBudget {
 public:
  // Bytes held on one device until destroyed or released. Empty when default-made or moved.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { Release(); }

    const std::string& device() const { return device_; }
    uint64_t bytes() const { return bytes_; }

    // Moves `bytes` (at most what it holds) into a reservation of their own: a closing session
    // hands its slab's share to the warm slab that outlives it.
    Reservation Split(uint64_t bytes);
    // Takes over `other` (the same budget and device, or empty): a session takes the bytes of
    // the warm slab it reuses.
    void Merge(Reservation other);
    // Gives the bytes back now.
    void Release();

   private:
    friend class DeviceBudget;
    Reservation(DeviceBudget* budget, std::string device, uint64_t bytes)
        : budget_(budget), device_(std::move(device)), bytes_(bytes) {}

    DeviceBudget* budget_ = nullptr;
    std::string device_;
    uint64_t bytes_ = 0;
  };

  DeviceBudget() = default;
  DeviceBudget(const DeviceBudget&) = delete;
  DeviceBudget& operator=(const DeviceBudget&) = delete;

  // Reserves `bytes` on `device` when everything reserved there stays within `limit_bytes`
  // (0: no limit) and, with `ram` (a host device), the pool can hold them too; nullopt otherwise
  // (nothing reserved). A device's `ram` is the same on every call.
  std::optional<Reservation> TryReserve(const std::string& device, uint64_t limit_bytes,
                                        uint64_t bytes, HostPool* ram = nullptr);

  // What is reserved on `device` now.
  uint64_t reserved(const std::string& device) const;

 private:
  void GiveBack(const std::string& device, uint64_t bytes);

  struct Device {
    uint64_t reserved = 0;
    HostPool* ram = nullptr;  // where a host device's bytes are also counted
  };

  mutable absl::Mutex mu_;
  std::map<std::string, Device> devices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddo

#endif  // DDO_DAEMON_STREAM_DEVICE_BUDGET_H_
