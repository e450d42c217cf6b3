#include "daemon/store/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "daemon/common/temp_dir_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ddo {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---- A small safetensors writer -------------------------------------------------------

void WriteBytes(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string LittleEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  for (size_t i = 0; i < 8; ++i) {
    bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  }
  return bytes;
}

// The length prefix, `header` exactly as given, then `data_bytes` bytes of data.
void WriteRaw(const std::string& path, absl::string_view header, size_t data_bytes) {
  std::string data(data_bytes, '\0');
  for (size_t i = 0; i < data_bytes; ++i) {
    data[i] = static_cast<char>(i * 7 + 1);
  }
  WriteBytes(path, LittleEndian64(header.size()) + std::string(header) + data);
}

struct TestTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

// A valid file with the tensors back to back in the order given.
void WriteModel(const std::string& path, const std::vector<TestTensor>& tensors,
                const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const TestTensor& tensor : tensors) {
    auto dtype = ParseSafetensorsDType(tensor.dtype);
    ASSERT_TRUE(dtype.ok());
    const uint64_t bytes = *TensorByteSize(*dtype, tensor.shape);
    header[tensor.name] = {{"dtype", tensor.dtype},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  WriteRaw(path, header.dump(), offset);
}

void WriteIndex(const std::string& path, const std::map<std::string, std::string>& weight_map) {
  const nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  WriteBytes(path, index.dump(2));
}

void MakeFolder(const std::string& path) { ASSERT_EQ(::mkdir(path.c_str(), 0700), 0) << path; }

std::vector<std::string> TensorNames(const SafetensorsFile& file) {
  std::vector<std::string> names;
  for (const SafetensorsTensor& tensor : file.tensors) {
    names.push_back(tensor.name);
  }
  return names;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// ---- One file ---------------------------------------------------------------------------

TEST(SafetensorsFileTest, ReadsTensorsInFileOrderWithMetadata) {
  TempDirForTest dir;
  const std::string path = dir.Join("model.safetensors");
  // Keys in another order than the data; trailing spaces pad the header as the reference
  // writer does for alignment.
  const std::string header =
      R"({"__metadata__": {"format": "pt"},)"
      R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]},)"
      R"( "a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},)"
      R"( "c": {"dtype": "U8", "shape": [], "data_offsets": [20, 21]}}     )";
  WriteRaw(path, header, 21);

  auto file = ReadSafetensorsFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->path, path);
  EXPECT_EQ(file->data_start, 8 + header.size());
  EXPECT_EQ(file->file_size, 8 + header.size() + 21);
  EXPECT_THAT(TensorNames(*file), ElementsAre("a", "b", "c"));
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));

  const SafetensorsTensor& a = file->tensors[0];
  EXPECT_EQ(a.dtype, DType::kBF16);
  EXPECT_THAT(a.shape, ElementsAre(2, 3));
  EXPECT_EQ(a.file_offset, file->data_start);
  EXPECT_EQ(a.byte_size, 12u);
  const SafetensorsTensor& b = file->tensors[1];
  EXPECT_EQ(b.dtype, DType::kF32);
  EXPECT_EQ(b.file_offset, file->data_start + 12);
  EXPECT_EQ(b.byte_size, 8u);
  const SafetensorsTensor& c = file->tensors[2];
  EXPECT_TRUE(c.shape.empty());
  EXPECT_EQ(c.byte_size, 1u);
}

TEST(SafetensorsFileTest, ZeroSizeTensorsNeverOverlap) {
  TempDirForTest dir;
  const std::string path = dir.Join("model.safetensors");
  WriteRaw(path,
           R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
           R"( "empty_inside": {"dtype": "F16", "shape": [0, 4], "data_offsets": [4, 4]},)"
           R"( "empty_start": {"dtype": "I64", "shape": [3, 0], "data_offsets": [0, 0]},)"
           R"( "empty_end": {"dtype": "BOOL", "shape": [0], "data_offsets": [8, 8]}})",
           8);
  auto file = ReadSafetensorsFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(TensorNames(*file), ElementsAre("empty_start", "x", "empty_inside", "empty_end"));
  EXPECT_EQ(file->tensors[0].byte_size, 0u);
}

TEST(SafetensorsFileTest, AFileWithoutTensorsIsValid) {
  TempDirForTest dir;
  const std::string path = dir.Join("empty.safetensors");
  WriteRaw(path, "{}", 0);
  auto file = ReadSafetensorsFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors.empty());
  EXPECT_EQ(file->data_start, 10u);
}

TEST(SafetensorsFileTest, ParseIsPure) {
  const std::string header = R"({"w": {"dtype": "U8", "shape": [3], "data_offsets": [1, 4]}})";
  auto file = ParseSafetensorsHeader("/virtual.safetensors", header, 100);
  ASSERT_TRUE(file.ok()) << file.status();
  const uint64_t data_start = 8 + header.size();
  EXPECT_EQ(file->data_start, data_start);
  EXPECT_EQ(file->tensors[0].file_offset, data_start + 1);

  auto past_end = ParseSafetensorsHeader("/virtual.safetensors", "{}", 9);
  EXPECT_TRUE(absl::IsInvalidArgument(past_end.status()));
  EXPECT_THAT(Message(past_end.status()), HasSubstr("/virtual.safetensors"));
}

TEST(SafetensorsFileTest, MissingFileAndFolders) {
  TempDirForTest dir;
  auto missing = ReadSafetensorsFile(dir.Join("nope.safetensors"));
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(Message(missing.status()), HasSubstr(dir.Join("nope.safetensors")));

  auto folder = ReadSafetensorsFile(dir.path());
  EXPECT_TRUE(absl::IsInvalidArgument(folder.status())) << folder.status();
  EXPECT_THAT(Message(folder.status()), HasSubstr("not a regular file"));
}

TEST(SafetensorsFileTest, BadLengthPrefixes) {
  TempDirForTest dir;
  struct Case {
    const char* what;
    std::string bytes;
    const char* phrase;
  };
  const std::vector<Case> cases = {
      {"shorter than 8 bytes", "\x05\0\0", "too short"},
      {"length 0", LittleEndian64(0) + "{}", "too small"},
      {"length 1", LittleEndian64(1) + "{}", "too small"},
      {"over 100 MiB", LittleEndian64(uint64_t{200} << 20) + "{}", "100 MiB limit"},
      {"absurd length", LittleEndian64(~uint64_t{0}) + "{}", "limit"},
      {"past the end", LittleEndian64(100) + "{}", "runs past the end of the file"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.Join("bad.safetensors");
    WriteBytes(path, c.bytes);
    auto file = ReadSafetensorsFile(path);
    ASSERT_FALSE(file.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(file.status())) << file.status();
    EXPECT_THAT(Message(file.status()), HasSubstr(path));
    EXPECT_THAT(Message(file.status()), HasSubstr(c.phrase));
  }
}

// Every header check: the code, the file, the tensor (when there is one) and the reason.
TEST(SafetensorsFileTest, BadHeaders) {
  struct Case {
    const char* what;
    std::string header;
    size_t data_bytes;
    const char* tensor;  // nullptr: the error is about the file
    const char* phrase;
  };
  const std::vector<Case> cases = {
      {"syntax error", R"({"w": )", 8, nullptr, "not valid JSON: parse error at line 1"},
      {"invalid UTF-8", "{\"\xff\": 1}", 8, nullptr, "not valid JSON"},
      {"not an object", "[1, 2]", 8, nullptr, "not a JSON object"},
      {"entry not an object", R"({"w": 5})", 8, "w", "entry is 5, not an object"},
      {"empty name", R"({"": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", 8, nullptr,
       "empty name"},
      {"repeated name",
       R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
       R"( "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
       8, "w", "more than once"},
      {"missing dtype", R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 8, "w",
       "\"dtype\" is missing"},
      {"dtype not a string", R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", 8, "w",
       "\"dtype\" is 4, not a string"},
      {"unknown dtype", R"({"w": {"dtype": "F12", "shape": [1], "data_offsets": [0, 4]}})", 8, "w",
       "unknown dtype \"F12\""},
      {"missing shape", R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 8, "w",
       "\"shape\" is missing"},
      {"shape not an array", R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 8,
       "w", "\"shape\" is 1, not an array"},
      {"negative dimension", R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 8,
       "w", "shape[0] is negative"},
      {"fractional dimension",
       R"({"w": {"dtype": "F32", "shape": [1, 1.5], "data_offsets": [0, 4]}})", 8, "w",
       "shape[1] is not a non-negative integer"},
      {"float dimension", R"({"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}})", 8,
       "w", "shape[0] is not a non-negative integer"},
      {"string dimension", R"({"w": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})", 8,
       "w", "shape[0] is not a non-negative integer"},
      {"dimension past int64",
       R"({"w": {"dtype": "U8", "shape": [9223372036854775808], "data_offsets": [0, 4]}})", 8, "w",
       "shape[0] = 9223372036854775808 is too large"},
      {"size overflow",
       R"({"w": {"dtype": "U64", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 8,
       "w", "too large"},
      {"missing data_offsets", R"({"w": {"dtype": "F32", "shape": [1]}})", 8, "w",
       "\"data_offsets\" is missing"},
      {"data_offsets not an array",
       R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": "0,4"}})", 8, "w",
       "not [begin, end]"},
      {"one offset", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4]}})", 8, "w",
       "not [begin, end]"},
      {"three offsets", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8,
       "w", "not [begin, end]"},
      {"negative offset", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 8,
       "w", "data_offsets[0] is negative"},
      {"float offset", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}})", 8, "w",
       "data_offsets[1] is not a non-negative integer"},
      {"offset past uint64",
       R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [0, 18446744073709551616]}})", 8, "w",
       "data_offsets[1] is not a non-negative integer"},
      {"end before begin", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 8,
       "w", "end before they begin"},
      {"size mismatch", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 8, "w",
       "F32 [2] needs 8 bytes but data_offsets [0, 4] span 4"},
      {"past the end of the file",
       R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4, "w",
       "run past the end of the file"},
      {"empty tensor far past the end (offsets above 2^53)",
       R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [18446744073709551615, )"
       R"(18446744073709551615]}})",
       4, "w", "run past the end of the file"},
      {"overlap",
       R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
       R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       12, "b", "overlaps tensor 'a'"},
      {"overlap inside a long tensor",
       R"({"long": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},)"
       R"( "m1": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
       16, "m1", "overlaps tensor 'long'"},
      {"metadata not an object", R"({"__metadata__": ["a"]})", 0, nullptr,
       "\"__metadata__\" is a JSON array, not an object of strings"},
      {"metadata value not a string", R"({"__metadata__": {"format": 1}})", 0, nullptr,
       "\"__metadata__\" entry 'format' is 1, not a string"},
  };
  TempDirForTest dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.Join("bad.safetensors");
    WriteRaw(path, c.header, c.data_bytes);
    auto file = ReadSafetensorsFile(path);
    ASSERT_FALSE(file.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(file.status())) << file.status();
    EXPECT_THAT(Message(file.status()), HasSubstr(path));
    if (c.tensor != nullptr) {
      EXPECT_THAT(Message(file.status()), HasSubstr(std::string("tensor '") + c.tensor + "'"));
    }
    EXPECT_THAT(Message(file.status()), HasSubstr(c.phrase));
  }
}

// ---- Sets of files ------------------------------------------------------------------------

class SafetensorsSetTest : public ::testing::Test {
 protected:
  // A Diffusers-style sharded folder: two shards, their index and a config.
  std::string MakeShardedFolder(const std::string& name) {
    const std::string folder = dir_.Join(name);
    MakeFolder(folder);
    WriteModel(folder + "/model-00001-of-00002.safetensors",
               {{"a.weight", "BF16", {2, 3}}, {"a.bias", "F32", {3}}}, {{"format", "pt"}});
    WriteModel(folder + "/model-00002-of-00002.safetensors", {{"b.weight", "F16", {4}}});
    WriteIndex(folder + "/model.safetensors.index.json",
               {{"a.weight", "model-00001-of-00002.safetensors"},
                {"a.bias", "model-00001-of-00002.safetensors"},
                {"b.weight", "model-00002-of-00002.safetensors"}});
    WriteBytes(folder + "/config.json", "{}");
    return folder;
  }

  absl::Status OpenError(const std::vector<std::string>& inputs, const std::string& index = "") {
    auto set = OpenSafetensorsSet(inputs, index);
    return set.ok() ? absl::OkStatus() : set.status();
  }

  TempDirForTest dir_;
};

TEST_F(SafetensorsSetTest, ShardedFolderWithIndex) {
  const std::string folder = MakeShardedFolder("transformer");
  // Neither a dotfile nor a non-safetensors file is looked at.
  WriteBytes(folder + "/.partial.safetensors", "garbage");
  auto set = OpenSafetensorsSet({folder + "/"}, "");
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->files.size(), 2u);
  EXPECT_EQ(set->files[0].path, folder + "/model-00001-of-00002.safetensors");
  EXPECT_EQ(set->files[1].path, folder + "/model-00002-of-00002.safetensors");
  EXPECT_EQ(set->index_path, folder + "/model.safetensors.index.json");
  EXPECT_EQ(set->total_bytes, 12u + 12u + 8u);
  EXPECT_THAT(TensorNames(set->files[0]), ElementsAre("a.weight", "a.bias"));
  EXPECT_EQ(set->files[0].metadata.at("format"), "pt");
}

TEST_F(SafetensorsSetTest, ExplicitIndexWithFileInputsAndDuplicatesLoadedOnce) {
  const std::string folder = MakeShardedFolder("unet");
  const std::string shard1 = folder + "/model-00001-of-00002.safetensors";
  const std::string shard2 = folder + "/./model-00002-of-00002.safetensors";
  auto set = OpenSafetensorsSet({shard2, shard1, folder}, folder + "/model.safetensors.index.json");
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->files.size(), 2u);
  EXPECT_EQ(set->files[0].path, folder + "/model-00002-of-00002.safetensors");
  EXPECT_EQ(set->files[1].path, shard1);
  EXPECT_EQ(set->total_bytes, 32u);
}

TEST_F(SafetensorsSetTest, SingleFileWithoutIndex) {
  const std::string path = dir_.Join("vae.safetensors");
  WriteModel(path, {{"w", "F32", {4, 4}}});
  auto set = OpenSafetensorsSet({path}, "");
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->files.size(), 1u);
  EXPECT_EQ(set->index_path, "");
  EXPECT_EQ(set->total_bytes, 64u);
}

TEST_F(SafetensorsSetTest, SymlinkedShardsAsInTheHuggingFaceCache) {
  const std::string blobs = dir_.Join("blobs");
  const std::string snapshot = dir_.Join("snapshot");
  MakeFolder(blobs);
  MakeFolder(snapshot);
  WriteModel(blobs + "/1111", {{"x", "U8", {5}}});
  WriteModel(blobs + "/2222", {{"y", "U8", {6}}});
  WriteIndex(blobs + "/3333", {{"x", "m-1.safetensors"}, {"y", "m-2.safetensors"}});
  ASSERT_EQ(::symlink("../blobs/1111", (snapshot + "/m-1.safetensors").c_str()), 0);
  ASSERT_EQ(::symlink("../blobs/2222", (snapshot + "/m-2.safetensors").c_str()), 0);
  ASSERT_EQ(::symlink("../blobs/3333", (snapshot + "/m.safetensors.index.json").c_str()), 0);
  auto set = OpenSafetensorsSet({snapshot}, "");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->files.size(), 2u);
  EXPECT_EQ(set->index_path, snapshot + "/m.safetensors.index.json");
  EXPECT_EQ(set->total_bytes, 11u);
}

TEST_F(SafetensorsSetTest, AFolderWithSeveralIndexesUsesNone) {
  const std::string folder = MakeShardedFolder("two_indexes");
  WriteIndex(folder + "/other.safetensors.index.json", {});
  auto set = OpenSafetensorsSet({folder}, "");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->index_path, "");
  EXPECT_EQ(set->files.size(), 2u);
}

TEST_F(SafetensorsSetTest, BadInputs) {
  auto none = OpenSafetensorsSet({}, "");
  EXPECT_TRUE(absl::IsInvalidArgument(none.status()));

  absl::Status relative = OpenError({"models/unet"});
  EXPECT_TRUE(absl::IsInvalidArgument(relative)) << relative;
  EXPECT_THAT(Message(relative), HasSubstr("absolute"));
  EXPECT_THAT(Message(relative), HasSubstr("models/unet"));

  const std::string file = dir_.Join("m.safetensors");
  WriteModel(file, {{"w", "U8", {1}}});
  absl::Status relative_index = OpenError({file}, "m.safetensors.index.json");
  EXPECT_TRUE(absl::IsInvalidArgument(relative_index)) << relative_index;
  EXPECT_THAT(Message(relative_index), HasSubstr("index_file"));

  absl::Status missing = OpenError({dir_.Join("nothing-here")});
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_THAT(Message(missing), HasSubstr(dir_.Join("nothing-here")));

  const std::string folder = dir_.Join("no_weights");
  MakeFolder(folder);
  WriteBytes(folder + "/config.json", "{}");
  absl::Status empty_folder = OpenError({folder});
  EXPECT_TRUE(absl::IsInvalidArgument(empty_folder)) << empty_folder;
  EXPECT_THAT(Message(empty_folder), HasSubstr(folder));
  EXPECT_THAT(Message(empty_folder), HasSubstr("no *.safetensors"));

  absl::Status missing_index = OpenError({file}, dir_.Join("absent.safetensors.index.json"));
  EXPECT_TRUE(absl::IsNotFound(missing_index)) << missing_index;
}

TEST_F(SafetensorsSetTest, ABadShardIsNamed) {
  const std::string folder = MakeShardedFolder("broken");
  const std::string shard = folder + "/model-00002-of-00002.safetensors";
  WriteRaw(shard, R"({"b.weight": {"dtype": "F16", "shape": [4], "data_offsets": [0, 4]}})", 8);
  absl::Status status = OpenError({folder});
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(Message(status), HasSubstr(shard));
  EXPECT_THAT(Message(status), HasSubstr("tensor 'b.weight'"));
}

TEST_F(SafetensorsSetTest, ATensorInTwoFilesNamesBoth) {
  const std::string first = dir_.Join("first.safetensors");
  const std::string second = dir_.Join("second.safetensors");
  WriteModel(first, {{"shared", "U8", {1}}, {"only_first", "U8", {1}}});
  WriteModel(second, {{"only_second", "U8", {1}}, {"shared", "U8", {2}}});
  absl::Status status = OpenError({first, second});
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(Message(status), HasSubstr("tensor 'shared'"));
  EXPECT_THAT(Message(status), HasSubstr(first));
  EXPECT_THAT(Message(status), HasSubstr(second));
}

TEST_F(SafetensorsSetTest, TwoFoldersWithTheirOwnIndexesNeedAnExplicitChoice) {
  const std::string one = MakeShardedFolder("one");
  const std::string two = dir_.Join("two");
  MakeFolder(two);
  WriteModel(two + "/m.safetensors", {{"z", "U8", {1}}});
  WriteIndex(two + "/m.safetensors.index.json", {{"z", "m.safetensors"}});
  absl::Status status = OpenError({one, two});
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(Message(status), HasSubstr("several index files"));
}

TEST_F(SafetensorsSetTest, IndexMismatches) {
  const std::string folder = MakeShardedFolder("model");
  const std::string shard1 = folder + "/model-00001-of-00002.safetensors";
  const std::string shard2 = folder + "/model-00002-of-00002.safetensors";
  const std::string index = folder + "/custom.safetensors.index.json";
  struct Case {
    const char* what;
    std::map<std::string, std::string> weight_map;
    std::vector<std::string> names;  // what the message must name
  };
  const std::vector<Case> cases = {
      {"extra shard",
       {{"a.weight", "model-00001-of-00002.safetensors"},
        {"a.bias", "model-00001-of-00002.safetensors"},
        {"b.weight", "model-00002-of-00002.safetensors"},
        {"c.weight", "model-00003-of-00003.safetensors"}},
       {"shard 'model-00003-of-00003.safetensors'", "not among the files being loaded"}},
      {"missing shard",
       {{"a.weight", "model-00001-of-00002.safetensors"},
        {"a.bias", "model-00001-of-00002.safetensors"}},
       {shard2, "does not list shard"}},
      {"tensor in the wrong shard",
       {{"a.weight", "model-00001-of-00002.safetensors"},
        {"a.bias", "model-00002-of-00002.safetensors"},
        {"b.weight", "model-00002-of-00002.safetensors"}},
       {"tensor 'a.bias'", "shard 'model-00002-of-00002.safetensors'", shard1}},
      {"tensor missing from weight_map",
       {{"a.weight", "model-00001-of-00002.safetensors"},
        {"b.weight", "model-00002-of-00002.safetensors"}},
       {"tensor 'a.bias'", shard1, "lacks"}},
      {"tensor in no file",
       {{"a.weight", "model-00001-of-00002.safetensors"},
        {"a.bias", "model-00001-of-00002.safetensors"},
        {"b.weight", "model-00002-of-00002.safetensors"},
        {"ghost", "model-00002-of-00002.safetensors"}},
       {"tensor 'ghost'", "no file being loaded holds it"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    WriteIndex(index, c.weight_map);
    absl::Status status = OpenError({folder}, index);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_THAT(Message(status), HasSubstr(index));
    for (const std::string& name : c.names) {
      EXPECT_THAT(Message(status), HasSubstr(name));
    }
  }

  // Loading one shard with the folder's index: the other shard is listed but not loaded.
  absl::Status one_shard = OpenError({shard1}, folder + "/model.safetensors.index.json");
  EXPECT_TRUE(absl::IsInvalidArgument(one_shard)) << one_shard;
  EXPECT_THAT(Message(one_shard), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST_F(SafetensorsSetTest, MalformedIndexes) {
  const std::string file = dir_.Join("m.safetensors");
  WriteModel(file, {{"w", "U8", {1}}});
  const std::string index = dir_.Join("m.safetensors.index.json");
  struct Case {
    const char* what;
    std::string text;
    const char* phrase;
  };
  const std::vector<Case> cases = {
      {"syntax error", R"({"weight_map": {)", "not valid JSON"},
      {"not an object", "[]", "not an object"},
      {"no weight_map", R"({"metadata": {}})", "no \"weight_map\""},
      {"weight_map not an object", R"({"weight_map": ["m.safetensors"]})", "no \"weight_map\""},
      {"shard not a string", R"({"weight_map": {"w": 1}})", "weight_map entry 'w' is 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    WriteBytes(index, c.text);
    absl::Status status = OpenError({file}, index);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_THAT(Message(status), HasSubstr(index));
    EXPECT_THAT(Message(status), HasSubstr(c.phrase));
  }
  WriteBytes(index, R"({"weight_map": {"w": "m.safetensors"}})");
  EXPECT_TRUE(OpenError({file}, index).ok());
}

}  // namespace
}  // namespace ddo
