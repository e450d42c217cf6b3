// File: daemon/store/safetensors_hash.h
//
// The content hash (tensor_table.h's ContentHash) of a safetensors set as it lies in its files:
// every tensor's bytes in table order (files in order, tensors by offset), read through the
// set's descriptors. ddod uses it when a user asks for a component another user loaded from
// other files: the same hash proves the caller holds the same bytes (docs/security.md).
//
// Thread-safety: reads the set's descriptors with pread only; one caller per set.
#ifndef DDO_DAEMON_STORE_SAFETENSORS_HASH_H_
#define DDO_DAEMON_STORE_SAFETENSORS_HASH_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/store/safetensors.h"

namespace ddo {

// CANCELLED when `cancelled` says so (asked between 16 MiB reads); DATA_LOSS when a file
// shrank since it was validated.
absl::StatusOr<std::string> ContentHashOfSafetensors(const SafetensorsSet& set,
                                                     const std::function<bool()>& cancelled);

}  // namespace ddo

#endif  // DDO_DAEMON_STORE_SAFETENSORS_HASH_H_
