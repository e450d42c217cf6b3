#include "daemon/stream/session_grants.h"

#include "daemon/store/segment_grants.h"

namespace ddo {

std::vector<SegmentGrant> SessionGrants(const OpenedStream& opened) {
  std::vector<SegmentGrant> grants = ReadGrants(opened.component);
  for (const std::string* name : {&opened.control_block_shm, &opened.doorbell_shm}) {
    if (!name->empty()) grants.push_back({*name, /*writable=*/true});
  }
  for (const std::string* name : {&opened.memory.resident_slab_shm, &opened.memory.ring_shm}) {
    if (!name->empty()) grants.push_back({*name, /*writable=*/false});
  }
  return grants;
}

}  // namespace ddo
