#include "daemon/store/manifest.h"

#include <xxhash.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "daemon/common/file_system.h"
#include "daemon/common/temp_dir_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace ddo {
namespace {

using ::testing::HasSubstr;

ManifestComponent Example() {
  ManifestComponent component;
  component.cache_key = "flux/transformer@main:bf16";
  component.component_id = "0123456789abcdef";
  component.structure_hash = "xxh3-64:00000000000000aa";
  component.segments = {{"/ddo-0-abc-0123", 2 << 20}};
  TensorEntry tensor;
  tensor.name = "blocks.0.attn.to_q.weight";
  tensor.dtype = DType::kBF16;
  tensor.shape = {8, 4};
  tensor.byte_size = 64;
  tensor.module_path = "blocks.0.attn.to_q";
  tensor.module_class = "Linear";
  tensor.unit = 3;
  tensor.offset = 4096;
  component.tensors.push_back(tensor);
  return component;
}

TEST(ManifestTest, RoundTrips) {
  TempDirForTest dir;
  const std::string path = dir.Join("manifest.json");
  ASSERT_TRUE(WriteManifest(path, {Example()}).ok());
  auto read = ReadManifest(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  const ManifestComponent& component = read->front();
  EXPECT_EQ(component.cache_key, "flux/transformer@main:bf16");
  ASSERT_EQ(component.segments.size(), 1u);
  EXPECT_EQ(component.segments[0].name, "/ddo-0-abc-0123");
  EXPECT_EQ(component.segments[0].size, 2u << 20);
  EXPECT_EQ(component.base_cache_key, "");
  ASSERT_EQ(component.tensors.size(), 1u);
  EXPECT_EQ(component.tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(component.tensors[0].shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(component.tensors[0].offset, 4096u);
  EXPECT_EQ(component.tensors[0].unit, 3u);
  EXPECT_EQ(component.tensors[0].module_class, "Linear");
}

TEST(ManifestTest, ADerivedVersionRoundTripsItsSegmentsAndIndexes) {
  TempDirForTest dir;
  const std::string path = dir.Join("manifest.json");
  ManifestComponent derived = Example();
  derived.cache_key = "flux/transformer+lora";
  derived.segments = {{"/ddo-0-abc-own", 2 << 20}, {"/ddo-0-abc-0123", 4 << 20}};
  derived.base_cache_key = "flux/transformer@main:bf16";
  derived.base_component_id = "0123456789abcdef";
  TensorEntry shared = derived.tensors[0];
  shared.name = "blocks.0.attn.to_k.weight";
  shared.segment = 1;
  shared.offset = 8192;
  derived.tensors.push_back(shared);
  ASSERT_TRUE(WriteManifest(path, {Example(), derived}).ok());
  auto read = ReadManifest(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  const ManifestComponent& back = (*read)[1];
  EXPECT_EQ(back.segments, derived.segments);
  EXPECT_EQ(back.base_cache_key, "flux/transformer@main:bf16");
  EXPECT_EQ(back.base_component_id, "0123456789abcdef");
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors[0].segment, 0u);
  EXPECT_EQ(back.tensors[1].segment, 1u);
  EXPECT_EQ(back.tensors[1].offset, 8192u);
  // A ddod from before derived versions cannot misread it as one segment: no segment_name.
  std::ifstream in(path);
  const nlohmann::json document = nlohmann::json::parse(in);
  EXPECT_TRUE(document["components"][0].contains("segment_name"));
  EXPECT_FALSE(document["components"][1].contains("segment_name"));
}

TEST(ManifestTest, AManifestFromBeforeDerivedVersionsReadsAsOneSegment) {
  TempDirForTest dir;
  const std::string path = dir.Join("manifest.json");
  const nlohmann::json tensor{{"name", "w"},        {"dtype", "F32"},      {"shape", {4}},
                              {"byte_size", 16},    {"module_path", ""},   {"module_class", ""},
                              {"unit", 0},          {"is_buffer", false},  {"offset", 256}};
  const nlohmann::json components = nlohmann::json::array(
      {{{"cache_key", "old"},
        {"component_id", "0123456789abcdef"},
        {"structure_hash", "xxh3-64:00000000000000aa"},
        {"content_hash", ""},
        {"segment_name", "/ddo-0-abc-old"},
        {"segment_size", 2 << 20},
        {"tensors", {tensor}}}});
  const std::string text = components.dump();
  const nlohmann::json document{
      {"format", "ddo-pool-manifest"},
      {"version", 1},
      {"checksum", absl::StrFormat("xxh3-64:%016x", XXH3_64bits(text.data(), text.size()))},
      {"components", components}};
  std::ofstream(path) << document.dump(1);
  auto read = ReadManifest(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  ASSERT_EQ(read->front().segments.size(), 1u);
  EXPECT_EQ(read->front().segments[0].name, "/ddo-0-abc-old");
  EXPECT_EQ(read->front().segments[0].size, 2u << 20);
  EXPECT_EQ(read->front().tensors[0].segment, 0u);
  EXPECT_EQ(read->front().tensors[0].offset, 256u);
  EXPECT_EQ(read->front().base_cache_key, "");
}

TEST(ManifestTest, MissingIsNotFound) {
  TempDirForTest dir;
  EXPECT_TRUE(absl::IsNotFound(ReadManifest(dir.Join("none.json")).status()));
}

TEST(ManifestTest, AnEditedOrTornFileIsNotTrusted) {
  TempDirForTest dir;
  const std::string path = dir.Join("manifest.json");
  ASSERT_TRUE(WriteManifest(path, {Example()}).ok());
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  // An edit that keeps the JSON valid: the checksum catches it.
  std::string edited = text;
  edited.replace(edited.find("4096"), 4, "8192");
  std::ofstream(path) << edited;
  auto read = ReadManifest(path);
  EXPECT_TRUE(absl::IsDataLoss(read.status()));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("checksum"));
  // Fields of the wrong type.
  std::string wrong_type = text;
  wrong_type.replace(wrong_type.find("\"ddo-pool-manifest\""), 19, "1");
  std::ofstream(path) << wrong_type;
  EXPECT_TRUE(absl::IsDataLoss(ReadManifest(path).status()));
  // A torn write.
  std::ofstream(path) << text.substr(0, text.size() / 2);
  EXPECT_TRUE(absl::IsDataLoss(ReadManifest(path).status()));
}

// Injected faults: every step of the atomic replacement fails in turn; each time the previous
// manifest stays valid and readable, no temporary is left, and a later write succeeds.
struct ManifestFault {
  FileOp op;
  int error_number;
  absl::StatusCode code;
  const char* says;  // the operation and the errno's text
};

class ManifestFaultTest : public ::testing::TestWithParam<ManifestFault> {};

TEST_P(ManifestFaultTest, TheOldManifestSurvivesAndALaterWriteSucceeds) {
  const ManifestFault& fault = GetParam();
  TempDirForTest dir;
  const std::string path = dir.Join("manifest.json");
  ASSERT_TRUE(WriteManifest(path, {Example()}).ok());
  ManifestComponent second = Example();
  second.cache_key = "another/key";

  FaultInjectingFileSystem fs;
  fs.FailNth(fault.op, fault.error_number);
  const absl::Status failed = WriteManifest(path, {Example(), second}, &fs);
  EXPECT_EQ(failed.code(), fault.code) << failed;
  EXPECT_THAT(std::string(failed.message()), HasSubstr(fault.says));
  EXPECT_EQ(fs.Calls(fault.op), 1);

  auto old = ReadManifest(path);
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_EQ(old->size(), 1u) << "the previous manifest, whole";
  EXPECT_EQ(old->front().cache_key, Example().cache_key);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp")) << "no half-written temporary left";

  ASSERT_TRUE(WriteManifest(path, {Example(), second}, &fs).ok());
  auto now = ReadManifest(path);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(
    EachStep, ManifestFaultTest,
    ::testing::Values(
        ManifestFault{FileOp::kOpen, EACCES, absl::StatusCode::kPermissionDenied,
                      ".tmp: Permission denied"},
        ManifestFault{FileOp::kWrite, ENOSPC, absl::StatusCode::kResourceExhausted,
                      "manifest.json.tmp: No space left on device"},
        ManifestFault{FileOp::kWrite, EIO, absl::StatusCode::kInternal,
                      "write /tmp/ddo-test-"},
        ManifestFault{FileOp::kSync, EIO, absl::StatusCode::kInternal,
                      "manifest.json.tmp: Input/output error"},
        ManifestFault{FileOp::kRename, ENOSPC, absl::StatusCode::kResourceExhausted,
                      "manifest.json: No space left on device"}));

}  // namespace
}  // namespace ddo
