// File: daemon/common/xxh3_hasher.h
//
// An XXH3-64 hash computed in pieces, owning its xxHash state. For identities and signatures
// only (structure hashes, plan signatures, content hashes the proof does not rely on):
// XXH3 collisions are cheap to make, so nothing that grants access compares XXH3 digests
// (docs/security.md, finding 11).
//
// Thread-safety: one thread at a time per hasher.
#ifndef DDO_DAEMON_COMMON_XXH3_HASHER_H_
#define DDO_DAEMON_COMMON_XXH3_HASHER_H_

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddo {

class Xxh3Hasher {
 public:
  Xxh3Hasher() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;
  ~Xxh3Hasher() { XXH3_freeState(state_); }

  void Update(const void* data, size_t size) { XXH3_64bits_update(state_, data, size); }
  uint64_t Digest() const { return XXH3_64bits_digest(state_); }
  // The digest as 16 lowercase hex digits.
  std::string HexDigest() const;

 private:
  XXH3_state_t* state_;
};

}  // namespace ddo

#endif  // DDO_DAEMON_COMMON_XXH3_HASHER_H_
