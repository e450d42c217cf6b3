#include "daemon/store/safetensors_hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"

namespace ddo {
namespace {

constexpr size_t kChunkBytes = size_t{16} << 20;

}  // namespace

Sha256Hasher::Sha256Hasher() : context_(EVP_MD_CTX_new()) {
  // Only allocation can fail here, and ddod cannot go on without memory.
  if (context_ == nullptr || EVP_DigestInit_ex(context_, EVP_sha256(), nullptr) != 1) {
    std::abort();
  }
}

Sha256Hasher::~Sha256Hasher() { EVP_MD_CTX_free(context_); }

void Sha256Hasher::Update(const void* data, size_t size) {
  if (EVP_DigestUpdate(context_, data, size) != 1) std::abort();
}

std::string Sha256Hasher::Digest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context_, digest, &length) != 1) std::abort();
  return absl::StrCat(
      "sha256:",
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), length)));
}

absl::StatusOr<SafetensorsHashes> HashSafetensors(const SafetensorsSet& set,
                                                  const std::function<bool()>& cancelled,
                                                  FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  ContentHasher content;
  Sha256Hasher proof;
  std::vector<char> buffer(kChunkBytes);
  for (const SafetensorsFile& file : set.files) {
    for (const SafetensorsTensor& tensor : file.tensors) {
      for (uint64_t done = 0; done < tensor.byte_size;) {
        if (cancelled()) return absl::CancelledError("cancelled while hashing the files");
        const size_t want =
            static_cast<size_t>(std::min<uint64_t>(kChunkBytes, tensor.byte_size - done));
        DDO_ASSIGN_OR_RETURN(const size_t got, fs->Read(file.fd.get(), tensor.file_offset + done,
                                                        buffer.data(), want, file.name));
        if (got == 0) {
          return absl::DataLossError(absl::StrCat(file.name, " shrank while ddod read it"));
        }
        content.Update(buffer.data(), static_cast<size_t>(got));
        proof.Update(buffer.data(), static_cast<size_t>(got));
        done += static_cast<uint64_t>(got);
      }
    }
  }
  return SafetensorsHashes{content.Digest(), proof.Digest()};
}

absl::StatusOr<std::string> ProofDigest(const std::vector<TensorEntry>& tensors,
                                        const ComponentBytes& bytes,
                                        const std::function<bool()>& cancelled) {
  Sha256Hasher proof;
  for (const TensorEntry& tensor : tensors) {
    const char* data = bytes.DataOf(tensor);
    for (uint64_t done = 0; done < tensor.byte_size;) {
      if (cancelled()) return absl::CancelledError("cancelled while hashing the component");
      const size_t piece =
          static_cast<size_t>(std::min<uint64_t>(kChunkBytes, tensor.byte_size - done));
      proof.Update(data + done, piece);
      done += piece;
    }
  }
  return proof.Digest();
}

}  // namespace ddo
