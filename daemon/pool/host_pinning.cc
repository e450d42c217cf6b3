// Pre-touching is the same for every backend; pinning lives in host_pinning_{cuda,none}.cc.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "daemon/pool/host_pinning.h"

namespace ddo {

void PreTouchPages(char* data, uint64_t size, int threads) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t pages = (size + page - 1) / page;
  threads = static_cast<int>(std::clamp<uint64_t>(threads, 1, std::max<uint64_t>(pages, 1)));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([=] {
      // Contiguous slices: each thread walks its own part of the mapping.
      const uint64_t first = pages * t / threads;
      const uint64_t last = pages * (t + 1) / threads;
      // One call maps the slice's pages for writing without touching the data (pages written
      // through the segment's descriptor are only mapped, never zeroed); kernels before 5.14
      // lack it, and get the page-by-page touch below.
      if (::madvise(data + first * page, (last - first) * page, MADV_POPULATE_WRITE) == 0) {
        return;
      }
      for (uint64_t p = first; p < last; ++p) {
        // A volatile read-modify-write of the same value faults the page in for writing
        // without changing the data (clients may already have written it).
        volatile char* byte = data + p * page;
        *byte = *byte;
      }
    });
  }
  for (auto& worker : workers) {
    worker.join();
  }
}

}  // namespace ddo
