// File: tests/fuzz/request_limits_fuzz.cc
//
// libFuzzer target for the request validators (daemon/service/request_limits.h). The input's
// first byte picks the request type (modulo the number of types; see kParsers), the rest is
// its serialized protobuf. The checker must never crash, and when it refuses a request its
// message must stay short and printable whatever the request held.
//
// Seeds: tests/fuzz/corpus/request_limits/ (tests/fuzz/make_request_limits_corpus.py).
#include <cstddef>
#include <cstdint>

#include <google/protobuf/stubs/logging.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/service/request_limits.h"

namespace {

// The longest refusal message any request may produce.
constexpr size_t kMaxMessageBytes = 4096;

template <typename Request>
absl::Status ParseAndCheck(const uint8_t* data, size_t size) {
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return absl::OkStatus();
  return ddo::CheckRequest(request);
}

absl::Status CheckFileNameBytes(const uint8_t* data, size_t size) {
  return ddo::CheckFileName(absl::string_view(reinterpret_cast<const char*>(data), size));
}

using Parser = absl::Status (*)(const uint8_t*, size_t);

// The order is the seed corpus's first byte: append only.
constexpr Parser kParsers[] = {
    ParseAndCheck<ddo::v1::GetInfoRequest>,            // 0
    ParseAndCheck<ddo::v1::GetStatsRequest>,           // 1
    ParseAndCheck<ddo::v1::ListPresetsRequest>,        // 2
    ParseAndCheck<ddo::v1::ResolveSettingsRequest>,    // 3
    ParseAndCheck<ddo::v1::ExplainPlanRequest>,        // 4
    ParseAndCheck<ddo::v1::ConnectRequest>,            // 5
    ParseAndCheck<ddo::v1::RegisterComponentRequest>,  // 6
    ParseAndCheck<ddo::v1::CommitUploadRequest>,       // 7
    ParseAndCheck<ddo::v1::AbortUploadRequest>,        // 8
    ParseAndCheck<ddo::v1::LoadSafetensorsRequest>,    // 9
    ParseAndCheck<ddo::v1::GetComponentRequest>,       // 10
    ParseAndCheck<ddo::v1::ListComponentsRequest>,     // 11
    ParseAndCheck<ddo::v1::EvictComponentRequest>,     // 12
    ParseAndCheck<ddo::v1::AttachRequest>,             // 13
    ParseAndCheck<ddo::v1::DetachRequest>,             // 14
    ParseAndCheck<ddo::v1::SetScheduleRequest>,        // 15
    ParseAndCheck<ddo::v1::ListSessionsRequest>,       // 16
    ParseAndCheck<ddo::v1::PhaseRequest>,              // 17
    ParseAndCheck<ddo::v1::ListProfilesRequest>,       // 18
    ParseAndCheck<ddo::v1::GetProfileRequest>,         // 19
    ParseAndCheck<ddo::v1::PutProfileRequest>,         // 20
    ParseAndCheck<ddo::v1::DeleteProfileRequest>,      // 21
    CheckFileNameBytes,                                // 22: the identity socket's FILE name
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf logs every string field that is not UTF-8; millions of lines say nothing here.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Parser parse = kParsers[data[0] % (sizeof(kParsers) / sizeof(kParsers[0]))];
  const absl::Status status = parse(data + 1, size - 1);
  if (status.ok()) return 0;
  if (status.code() != absl::StatusCode::kInvalidArgument &&
      status.code() != absl::StatusCode::kResourceExhausted) {
    __builtin_trap();
  }
  const absl::string_view message = status.message();
  if (message.size() > kMaxMessageBytes) __builtin_trap();
  for (char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) __builtin_trap();  // refused bytes are never echoed raw
  }
  return 0;
}
