#include "daemon/store/manifest.h"

#include <fstream>

#include "daemon/common/temp_dir_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddo {
namespace {

using ::testing::HasSubstr;

ManifestComponent Example() {
  ManifestComponent component;
  component.cache_key = "flux/transformer@main:bf16";
  component.component_id = "0123456789abcdef";
  component.structure_hash = "xxh3-64:00000000000000aa";
  component.segment_name = "/ddo-0-abc-0123";
  component.segment_size = 2 << 20;
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
  EXPECT_EQ(component.segment_size, 2u << 20);
  ASSERT_EQ(component.tensors.size(), 1u);
  EXPECT_EQ(component.tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(component.tensors[0].shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(component.tensors[0].offset, 4096u);
  EXPECT_EQ(component.tensors[0].unit, 3u);
  EXPECT_EQ(component.tensors[0].module_class, "Linear");
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

}  // namespace
}  // namespace ddo
