// File: daemon/store/safetensors_hash.h
//
// The hashes of the sharing proof (docs/security.md, "Ownership and sharing"): when a user
// asks for a component another user loaded from other files, ddod reads the caller's files
// itself and compares their bytes with the component's by SHA-256 (ProofDigest), over the same
// stream the content hash covers: every tensor's bytes in table order (files in order, tensors
// by offset). SHA-256, not the XXH3-64 content hash: XXH3 is not collision resistant (files
// with other bytes and the same XXH3 are cheap to make), so it would let a user plant its
// bytes under another user's model. The XXH3 content hash of the files comes from the same
// pass, for the checks that are not about trust (a client's announced content_hash).
//
// Thread-safety: Sha256Hasher is one caller's; the functions read the set's descriptors with
// pread only (one caller per set) and a component's bytes, which are read-only once READY.
#ifndef DDO_DAEMON_STORE_SAFETENSORS_HASH_H_
#define DDO_DAEMON_STORE_SAFETENSORS_HASH_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/store/component_bytes.h"
#include "daemon/store/safetensors.h"
#include "daemon/layout/tensor_table.h"

// OpenSSL's digest context, kept out of this header.
struct evp_md_ctx_st;

namespace ddo {

// SHA-256 in pieces (OpenSSL's libcrypto). Digest is "sha256:<64 hex>".
class Sha256Hasher {
 public:
  Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;
  ~Sha256Hasher();

  void Update(const void* data, size_t size);
  // Once; the hasher is spent afterwards.
  std::string Digest();

 private:
  evp_md_ctx_st* context_;
};

struct SafetensorsHashes {
  std::string content_hash;  // "xxh3-64:<16 hex>": tensor_table.h's ContentHash
  std::string proof_digest;  // "sha256:<64 hex>": what ProofDigest gives for the same bytes
};

// Both hashes of a set's tensor bytes as they lie in its files, in one read. CANCELLED when
// `cancelled` says so (asked between 16 MiB reads); DATA_LOSS when a file shrank since it was
// validated. The reads go through `fs` (nullptr: FileSystem::Default()).
absl::StatusOr<SafetensorsHashes> HashSafetensors(const SafetensorsSet& set,
                                                  const std::function<bool()>& cancelled,
                                                  FileSystem* fs = nullptr);

// "sha256:<64 hex>" of every tensor's bytes in table order, wherever they lie: the digest a
// caller's files must match to share the component. CANCELLED when `cancelled` says so (asked
// every 16 MiB).
absl::StatusOr<std::string> ProofDigest(const std::vector<TensorEntry>& tensors,
                                        const ComponentBytes& bytes,
                                        const std::function<bool()>& cancelled);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SAFETENSORS_HASH_H_
