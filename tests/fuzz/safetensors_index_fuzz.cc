// libFuzzer target: ParseSafetensorsIndex (a *.safetensors.index.json) on arbitrary bytes.
// An accepted index lists each tensor once; a refused one says so in clean text.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/store/safetensors.h"
#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto index = ddo::ParseSafetensorsIndex("fuzz.safetensors.index.json", text);
  if (!index.ok()) {
    ddo::CheckMessageIsClean(index.status());
    return 0;
  }
  std::set<std::string> tensors;
  for (const auto& [tensor, shard] : index->weight_map) {
    ddo::FuzzCheck(tensors.insert(tensor).second, "weight_map lists each tensor once");
  }
  return 0;
}
