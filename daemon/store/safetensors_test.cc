#include "daemon/store/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// The descriptor-based reader on a path, opened here the way a client would.
absl::StatusOr<SafetensorsFile> ReadPath(const std::string& path) {
  SafetensorsSource source{path, UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK))};
  EXPECT_TRUE(source.fd.valid()) << path;
  return ReadSafetensorsFile(source);
}

// Paths resolved and opened as ddod does for its own user, then validated.
absl::StatusOr<SafetensorsSet> OpenPaths(const std::vector<std::string>& inputs,
                                         const std::string& index_file,
                                         const CancelledFn& cancelled = {}) {
  auto opened = OpenSafetensorsPaths(inputs, index_file);
  if (!opened.ok()) {
    return opened.status();
  }
  return OpenSafetensorsSet(std::move(opened->first), std::move(opened->second), cancelled);
}

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

  auto file = ReadPath(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->name, path);
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
  auto file = ReadPath(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(TensorNames(*file), ElementsAre("empty_start", "x", "empty_inside", "empty_end"));
  EXPECT_EQ(file->tensors[0].byte_size, 0u);
}

TEST(SafetensorsFileTest, AFileWithoutTensorsIsRefused) {
  TempDirForTest dir;
  const std::string path = dir.Join("empty.safetensors");
  for (const std::string header : {"{}", R"({"__metadata__": {"format": "pt"}})"}) {
    SCOPED_TRACE(header);
    WriteRaw(path, header, 0);
    auto file = ReadPath(path);
    EXPECT_TRUE(absl::IsInvalidArgument(file.status())) << file.status();
    EXPECT_THAT(Message(file.status()), HasSubstr("no tensors"));
  }
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
  auto missing = OpenSafetensorsPaths({dir.Join("nope.safetensors")}, "");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(Message(missing.status()), HasSubstr(dir.Join("nope.safetensors")));

  // A descriptor of a directory, as a client could pass one.
  SafetensorsSource folder{"folder", UniqueFd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY))};
  ASSERT_TRUE(folder.fd.valid());
  auto read = ReadSafetensorsFile(folder);
  EXPECT_TRUE(absl::IsInvalidArgument(read.status())) << read.status();
  EXPECT_THAT(Message(read.status()), HasSubstr("not a regular file (a directory)"));
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
      {"length 0", LittleEndian64(0) + "{}", "out of range (below the minimum of 2)"},
      {"length 1", LittleEndian64(1) + "{}", "out of range (below the minimum of 2)"},
      {"over 64 MiB", LittleEndian64((uint64_t{64} << 20) + 1) + "{}", "64 MiB limit"},
      {"absurd length", LittleEndian64(~uint64_t{0}) + "{}", "limit"},
      {"past the end", LittleEndian64(100) + "{}", "out of range (past the end of the file)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.Join("bad.safetensors");
    WriteBytes(path, c.bytes);
    auto file = ReadPath(path);
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
      {"syntax error", R"({"w": )", 8, nullptr,
       "header is not valid JSON (syntax error near byte 7)"},
      {"invalid UTF-8", "{\"\xff\": 1}", 8, nullptr, "not valid JSON"},
      {"not an object", "[1, 2]", 8, nullptr, "header is an array, not a JSON object"},
      {"a string", R"("text")", 8, nullptr, "header is a string, not a JSON object"},
      {"entry not an object", R"({"w": 5})", 8, "w", "entry is a number, not an object"},
      {"empty name", R"({"": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", 8, nullptr,
       "empty name"},
      {"repeated name",
       R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
       R"( "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
       8, "w", "more than once"},
      {"missing dtype", R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 8, "w",
       "\"dtype\" is missing"},
      {"dtype not a string", R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", 8, "w",
       "\"dtype\" is a number, not a string"},
      {"unknown dtype", R"({"w": {"dtype": "F12", "shape": [1], "data_offsets": [0, 4]}})", 8, "w",
       "unknown dtype \"F12\""},
      {"missing shape", R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 8, "w",
       "\"shape\" is missing"},
      {"shape not an array", R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 8,
       "w", "\"shape\" is a number, not an array"},
      {"negative dimension", R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 8,
       "w", "shape[0] is negative"},
      {"fractional dimension",
       R"({"w": {"dtype": "F32", "shape": [1, 1.5], "data_offsets": [0, 4]}})", 8, "w",
       "shape[1] is not a non-negative integer (a fraction"},
      {"float dimension", R"({"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}})", 8,
       "w", "shape[0] is not a non-negative integer"},
      {"string dimension", R"({"w": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})", 8,
       "w", "shape[0] is not a non-negative integer (a string)"},
      {"dimension past int64",
       R"({"w": {"dtype": "U8", "shape": [9223372036854775808], "data_offsets": [0, 4]}})", 8, "w",
       "shape[0] is too large (over 2^63 - 1)"},
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
       "\"__metadata__\" is an array, not an object of strings"},
      {"metadata value not a string", R"({"__metadata__": {"format": 1}})", 0, nullptr,
       "\"__metadata__\" entry 'format' is a number, not a string"},
      {"a key twice inside an entry",
       R"({"w": {"dtype": "U8", "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", 8, nullptr,
       "entry 'w' repeats the key 'dtype'"},
      {"metadata twice", R"({"__metadata__": {}, "__metadata__": {}})", 0, nullptr,
       "\"__metadata__\" twice"},
      {"entry nested too deeply",
       R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": )" +
           std::string(40, '[') + std::string(40, ']') + "}}",
       8, nullptr, "nested more than 32 levels deep"},
      {"trailing bytes", R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}} x)", 8,
       nullptr, "not valid JSON"},
  };
  TempDirForTest dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.Join("bad.safetensors");
    WriteRaw(path, c.header, c.data_bytes);
    auto file = ReadPath(path);
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
    auto set = OpenPaths(inputs, index);
    return set.ok() ? absl::OkStatus() : set.status();
  }

  TempDirForTest dir_;
};

TEST_F(SafetensorsSetTest, ShardedFolderWithIndex) {
  const std::string folder = MakeShardedFolder("transformer");
  // Neither a dotfile nor a non-safetensors file is looked at.
  WriteBytes(folder + "/.partial.safetensors", "garbage");
  auto set = OpenPaths({folder + "/"}, "");
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->files.size(), 2u);
  EXPECT_EQ(set->files[0].name, folder + "/model-00001-of-00002.safetensors");
  EXPECT_EQ(set->files[1].name, folder + "/model-00002-of-00002.safetensors");
  EXPECT_EQ(set->index_name, folder + "/model.safetensors.index.json");
  EXPECT_EQ(set->total_bytes, 12u + 12u + 8u);
  EXPECT_THAT(TensorNames(set->files[0]), ElementsAre("a.weight", "a.bias"));
  EXPECT_EQ(set->files[0].metadata.at("format"), "pt");
}

TEST_F(SafetensorsSetTest, ExplicitIndexWithFileInputsAndDuplicatesLoadedOnce) {
  const std::string folder = MakeShardedFolder("unet");
  const std::string shard1 = folder + "/model-00001-of-00002.safetensors";
  const std::string shard2 = folder + "/./model-00002-of-00002.safetensors";
  auto set = OpenPaths({shard2, shard1, folder}, folder + "/model.safetensors.index.json");
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->files.size(), 2u);
  EXPECT_EQ(set->files[0].name, folder + "/model-00002-of-00002.safetensors");
  EXPECT_EQ(set->files[1].name, shard1);
  EXPECT_EQ(set->total_bytes, 32u);
}

TEST_F(SafetensorsSetTest, SingleFileWithoutIndex) {
  const std::string path = dir_.Join("vae.safetensors");
  WriteModel(path, {{"w", "F32", {4, 4}}});
  auto set = OpenPaths({path}, "");
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->files.size(), 1u);
  EXPECT_EQ(set->index_name, "");
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
  auto set = OpenPaths({snapshot}, "");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->files.size(), 2u);
  EXPECT_EQ(set->index_name, snapshot + "/m.safetensors.index.json");
  EXPECT_EQ(set->total_bytes, 11u);
}

TEST_F(SafetensorsSetTest, AFolderWithSeveralIndexesUsesNone) {
  const std::string folder = MakeShardedFolder("two_indexes");
  WriteIndex(folder + "/other.safetensors.index.json", {});
  auto set = OpenPaths({folder}, "");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->index_name, "");
  EXPECT_EQ(set->files.size(), 2u);
}

TEST_F(SafetensorsSetTest, BadInputs) {
  auto none = OpenPaths({}, "");
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
      {"not an object", "[]", "index is an array, not a JSON object"},
      {"weight_map twice", R"({"weight_map": {}, "weight_map": {}})", "\"weight_map\" twice"},
      {"tensor twice", R"({"weight_map": {"w": "m.safetensors", "w": "m.safetensors"}})",
       "weight_map lists tensor 'w' more than once"},
      {"no weight_map", R"({"metadata": {}})", "no \"weight_map\""},
      {"weight_map not an object", R"({"weight_map": ["m.safetensors"]})", "no \"weight_map\""},
      {"shard not a string", R"({"weight_map": {"w": 1}})",
       "weight_map entry 'w' is a number, not a shard file name"},
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

// ---- Descriptors, special files, what messages may show ------------------------------------

// Bytes [begin, begin + bytes) of the data WriteRaw writes (byte i is i * 7 + 1).
std::string ExpectedData(uint64_t begin, uint64_t bytes) {
  std::string data;
  for (uint64_t i = begin; i < begin + bytes; ++i) {
    data.push_back(static_cast<char>(i * 7 + 1));
  }
  return data;
}

TEST_F(SafetensorsSetTest, DescriptorsAreReadNeverReopenedByPath) {
  const std::string folder = MakeShardedFolder("fds");
  std::vector<SafetensorsSource> files;
  for (const char* shard :
       {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    const std::string path = folder + "/" + shard;
    files.push_back({shard, UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC))});
    ASSERT_TRUE(files.back().fd.valid());
  }
  const std::string index_path = folder + "/model.safetensors.index.json";
  SafetensorsSource index{"model.safetensors.index.json",
                          UniqueFd(::open(index_path.c_str(), O_RDONLY | O_CLOEXEC))};
  ASSERT_TRUE(index.fd.valid());
  // Replace every path with junk: only the descriptors may be read from now on.
  for (const char* name : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json"}) {
    ASSERT_EQ(::unlink((folder + "/" + name).c_str()), 0);
    WriteBytes(folder + "/" + name, "junk");
  }

  auto set = OpenSafetensorsSet(std::move(files), std::move(index));
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->files.size(), 2u);
  EXPECT_EQ(set->files[0].name, "model-00001-of-00002.safetensors");
  EXPECT_EQ(set->index_name, "model.safetensors.index.json");
  EXPECT_EQ(set->total_bytes, 32u);
  // The set keeps the descriptors; the data comes through them.
  const SafetensorsFile& second = set->files[1];
  ASSERT_TRUE(second.fd.valid());
  const SafetensorsTensor& b = second.tensors.at(0);
  std::string data(b.byte_size, '\0');
  ASSERT_EQ(::pread(second.fd.get(), data.data(), data.size(), static_cast<off_t>(b.file_offset)),
            static_cast<ssize_t>(data.size()));
  EXPECT_EQ(data, ExpectedData(0, b.byte_size));
}

TEST_F(SafetensorsSetTest, TheSameFileTwiceIsLoadedOnce) {
  const std::string path = dir_.Join("m.safetensors");
  WriteModel(path, {{"w", "U8", {3}}});
  std::vector<SafetensorsSource> files;
  files.push_back({"m.safetensors", UniqueFd(::open(path.c_str(), O_RDONLY))});
  files.push_back({"again.safetensors", UniqueFd(::dup(files[0].fd.get()))});
  auto set = OpenSafetensorsSet(std::move(files), std::nullopt);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->files.size(), 1u);
  EXPECT_EQ(set->total_bytes, 3u);
}

TEST_F(SafetensorsSetTest, AnIndexCannotTellFilesOfTheSameNameApart) {
  const std::string one = dir_.Join("one.safetensors");
  const std::string two = dir_.Join("two.safetensors");
  WriteModel(one, {{"x", "U8", {1}}});
  WriteModel(two, {{"y", "U8", {1}}});
  const std::string index_path = dir_.Join("i.json");
  WriteIndex(index_path, {{"x", "m.safetensors"}, {"y", "m.safetensors"}});
  std::vector<SafetensorsSource> files;
  files.push_back({"a/m.safetensors", UniqueFd(::open(one.c_str(), O_RDONLY))});
  files.push_back({"b/m.safetensors", UniqueFd(::open(two.c_str(), O_RDONLY))});
  auto set = OpenSafetensorsSet(
      std::move(files),
      SafetensorsSource{"i.json", UniqueFd(::open(index_path.c_str(), O_RDONLY))});
  EXPECT_TRUE(absl::IsInvalidArgument(set.status())) << set.status();
  EXPECT_THAT(Message(set.status()), HasSubstr("cannot tell them apart"));
}

TEST_F(SafetensorsSetTest, SpecialFilesAreRefusedWithoutBlocking) {
  const std::string fifo = dir_.Join("pipe.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string fifo_link = dir_.Join("link.safetensors");
  ASSERT_EQ(::symlink(fifo.c_str(), fifo_link.c_str()), 0);
  const std::string good = dir_.Join("good.safetensors");
  WriteModel(good, {{"w", "U8", {1}}});

  struct Case {
    const char* what;
    std::vector<std::string> inputs;
    std::string index;
    const char* phrase;
  };
  const std::vector<Case> cases = {
      {"a FIFO", {fifo}, "", "a FIFO"},
      {"a symlink to a FIFO", {fifo_link}, "", "a FIFO"},
      {"a character device", {"/dev/null"}, "", "a character device"},
      {"a directory as the index", {good}, dir_.path(), "not a regular file (a directory)"},
      // An index is opened straight away (no stat first): this is the path a FIFO swapped in
      // after a check would take, and it must not block either.
      {"a FIFO as the index", {good}, fifo, "not a regular file (a FIFO)"},
      {"a symlink to a FIFO as the index", {good}, fifo_link, "not a regular file (a FIFO)"},
      {"a device as the index", {good}, "/dev/zero", "not a regular file (a character device)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto set = OpenPaths(c.inputs, c.index);  // a hang here is caught by the test timeout
    EXPECT_TRUE(absl::IsInvalidArgument(set.status())) << set.status();
    EXPECT_THAT(Message(set.status()), HasSubstr(c.phrase));
  }

  // A client's descriptor of a FIFO (it could hold the write end forever).
  SafetensorsSource pipe{"pipe.safetensors", UniqueFd(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK))};
  ASSERT_TRUE(pipe.fd.valid());
  auto read = ReadSafetensorsFile(pipe);
  EXPECT_TRUE(absl::IsInvalidArgument(read.status())) << read.status();
  EXPECT_THAT(Message(read.status()), HasSubstr("not a regular file (a FIFO)"));
}

TEST_F(SafetensorsSetTest, PathsWithANulByteAreRefusedBeforeAnyOpen) {
  const std::string good = dir_.Join("good.safetensors");
  WriteModel(good, {{"w", "U8", {1}}});
  // Truncated at the NUL this would name a valid file.
  const std::string with_nul = good + std::string("\0/../x", 6);
  auto input = OpenSafetensorsPaths({with_nul}, "");
  EXPECT_TRUE(absl::IsInvalidArgument(input.status())) << input.status();
  EXPECT_THAT(Message(input.status()), HasSubstr("NUL"));
  auto index = OpenSafetensorsPaths({good}, with_nul);
  EXPECT_TRUE(absl::IsInvalidArgument(index.status())) << index.status();
  EXPECT_THAT(Message(index.status()), HasSubstr("index_file contains a NUL byte"));
}

// Whatever a file that is not a safetensors file holds, no byte of it reaches a message.
TEST(SafetensorsFileTest, MessagesNeverShowTheBytesOfARefusedFile) {
  TempDirForTest dir;
  const std::string secret = "SECRET:$6$hash0123456789:19000:0:99999:7:::";
  struct Case {
    const char* what;
    std::string bytes;
  };
  const auto framed = [](const std::string& text) { return LittleEndian64(text.size()) + text; };
  const std::vector<Case> cases = {
      {"text (a huge length prefix)", secret + "\nmore lines\n"},
      {"a small length prefix, then text", framed(secret)},
      {"an invalid JSON literal", framed("{\"w\": " + secret + "}")},
      {"a JSON string", framed("\"" + secret + "\"")},
      {"a number where an entry goes", framed(R"({"w": 12345678})")},
      {"a string where dtype goes",
       framed(R"({"w": {"shape": [1], "data_offsets": [0, 1], "dtype": [")" + secret + "\"]}}")},
      {"an unknown key in an entry, then a syntax error",
       framed(R"({"w": {"shape": [1], "data_offsets": [0, 1], "dtype": "U8", ")" + secret +
              "\": 1}, \"x\": [}")},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.Join("refused");
    WriteBytes(path, c.bytes + std::string(64, '\0'));
    auto file = ReadPath(path);
    ASSERT_FALSE(file.ok());
    const std::string message = Message(file.status());
    EXPECT_THAT(message, HasSubstr(path));
    EXPECT_THAT(message, ::testing::Not(HasSubstr("SECRET")));
    EXPECT_THAT(message, ::testing::Not(HasSubstr("hash0123")));
    EXPECT_THAT(message, ::testing::Not(HasSubstr("12345678")));
    // Nor text read as a length prefix, as a number.
    uint64_t prefix = 0;
    for (size_t i = 0; i < 8 && i < c.bytes.size(); ++i) {
      prefix |= uint64_t{static_cast<unsigned char>(c.bytes[i])} << (8 * i);
    }
    if (prefix > kMaxSafetensorsHeaderBytes) {
      EXPECT_THAT(message, ::testing::Not(HasSubstr(std::to_string(prefix))));
    }
  }
}

TEST(SafetensorsFileTest, NamesInMessagesAreEscapedAndTruncated) {
  const std::string header = "{\"" + std::string("bad\\n\\u0001name") + std::string(500, 'x') +
                             R"(": {"dtype": "U8", "shape": [2], "data_offsets": [0, 1]}})";
  auto file = ParseSafetensorsHeader("/virtual", header, 8 + header.size() + 8);
  ASSERT_FALSE(file.ok());
  const std::string message = Message(file.status());
  EXPECT_THAT(message, HasSubstr("tensor 'bad\\n\\x01name"));
  EXPECT_THAT(message, HasSubstr("x..."));
  EXPECT_THAT(message, ::testing::Not(HasSubstr(std::string(129, 'x'))));
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

// ---- Size: linear parsing, caps, cancellation ---------------------------------------------

// A header of `count` one-byte tensors, back to back, in a scrambled order.
std::string ManyTensorHeader(size_t count) {
  std::string header = "{";
  for (size_t i = 0; i < count; ++i) {
    const size_t slot = (i * 7919) % count;  // 7919 is prime: a permutation when count isn't
                                             // a multiple of it
    absl::StrAppend(&header, i == 0 ? "" : ",", "\"layers.", i, ".weight\":{\"dtype\":\"U8\",",
                    "\"shape\":[1],\"data_offsets\":[", slot, ",", slot + 1, "]}");
  }
  header += "}";
  return header;
}

// 200k entries took minutes when the parse was quadratic; the ctest timeout catches a return.
TEST(SafetensorsScaleTest, ParsesAHeaderOf200kEntries) {
  constexpr size_t kCount = 200'000;
  const std::string header = ManyTensorHeader(kCount);
  auto file = ParseSafetensorsHeader("/virtual", header, 8 + header.size() + kCount);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), kCount);
  EXPECT_EQ(file->tensors.front().file_offset, file->data_start);
  EXPECT_EQ(file->tensors.back().file_offset, file->data_start + kCount - 1);

  // The same through a file and an index, as a set.
  TempDirForTest dir;
  const std::string path = dir.Join("big.safetensors");
  WriteRaw(path, header, kCount);
  std::string index = R"({"metadata": {"total_size": 200000}, "weight_map": {)";
  for (size_t i = 0; i < kCount; ++i) {
    absl::StrAppend(&index, i == 0 ? "" : ",", "\"layers.", i, ".weight\":\"big.safetensors\"");
  }
  index += "}}";
  WriteBytes(dir.Join("big.safetensors.index.json"), index);
  auto set = OpenPaths({dir.path()}, "");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->total_bytes, kCount);
  EXPECT_EQ(set->index_name, dir.Join("big.safetensors.index.json"));
}

TEST(SafetensorsScaleTest, ParsingStopsWhenCancelled) {
  const std::string header = ManyTensorHeader(20'000);
  int asked = 0;
  auto file = ParseSafetensorsHeader("/virtual", header, 8 + header.size() + 20'000, [&] {
    ++asked;
    return true;
  });
  EXPECT_TRUE(absl::IsCancelled(file.status())) << file.status();
  EXPECT_EQ(asked, 1);

  TempDirForTest dir;
  const std::string path = dir.Join("m.safetensors");
  WriteRaw(path, header, 20'000);
  auto set = OpenPaths({path}, "", [] { return true; });
  EXPECT_TRUE(absl::IsCancelled(set.status())) << set.status();
}

TEST(SafetensorsScaleTest, EntryCapsAreEnforced) {
  // One entry over the cap (the same tiny entry repeated: counted before anything else).
  std::string header = "{";
  for (uint64_t i = 0; i <= kMaxSafetensorsEntries; ++i) {
    header += i == 0 ? "\"a\":0" : ",\"a\":0";
  }
  header += "}";
  auto file = ParseSafetensorsHeader("/virtual", header, 8 + header.size());
  EXPECT_TRUE(absl::IsInvalidArgument(file.status())) << file.status();
  EXPECT_THAT(Message(file.status()), HasSubstr("more than 1000000 entries"));

  std::string index = "{\"weight_map\":{";
  for (uint64_t i = 0; i <= kMaxSafetensorsIndexEntries; ++i) {
    index += i == 0 ? "\"a\":\"s\"" : ",\"a\":\"s\"";
  }
  index += "}}";
  auto parsed = ParseSafetensorsIndex("/virtual.json", index);
  EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << parsed.status();
  EXPECT_THAT(Message(parsed.status()), HasSubstr("weight_map has more than 1000000 entries"));
}

TEST_F(SafetensorsSetTest, AnIndexOverTheSizeCapIsNotRead) {
  const std::string file = dir_.Join("m.safetensors");
  WriteModel(file, {{"w", "U8", {1}}});
  const std::string index = dir_.Join("m.safetensors.index.json");
  WriteBytes(index, R"({"weight_map": {"w": "m.safetensors"}})");
  ASSERT_EQ(::truncate(index.c_str(), static_cast<off_t>(kMaxSafetensorsIndexBytes + 1)), 0);
  absl::Status status = OpenError({file}, index);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(Message(status), HasSubstr("over the 64 MiB limit"));
}

}  // namespace
}  // namespace ddo
