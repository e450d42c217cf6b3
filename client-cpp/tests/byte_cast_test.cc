// File: client-cpp/tests/byte_cast_test.cc
//
// CastWeight is weight.to(dtype), bitwise: torch's own cast wherever the kernel does not apply
// (no CUDA, a CPU tensor, not installed, not 1-byte floating), the kernel's on a CUDA libtorch
// with a GPU (skipped elsewhere: Debian's torch 1.13 has no CUDA and no fp8 dtypes).
#include "client-cpp/src/consumer/byte_cast.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>
#include <string>

#include "client-cpp/src/consumer/device_stream.h"

namespace ddo::consumer {
namespace {

std::string ReadPtx() {
  std::ifstream stream(DDO_BYTE_CAST_PTX);
  std::stringstream text;
  text << stream.rdbuf();
  return text.str();
}

// Installs the committed PTX for one test, with a reporter that counts its calls.
class ByteCastTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InstallByteCast(ReadPtx(), [this](const std::string& reason) {
      ++reports_;
      last_report_ = reason;
    });
  }
  void TearDown() override { InstallByteCast("", nullptr); }

  int reports_ = 0;
  std::string last_report_;
};

TEST_F(ByteCastTest, TheCommittedPtxIsThere) {
  const std::string ptx = ReadPtx();
  EXPECT_NE(ptx.find(".entry ddo_byte_cast_u16"), std::string::npos) << DDO_BYTE_CAST_PTX;
  EXPECT_NE(ptx.find(".entry ddo_byte_cast_u32"), std::string::npos);
}

TEST_F(ByteCastTest, ACpuTensorIsCastByTorch) {
  const at::Tensor half = torch::randn({5, 7}).to(at::kHalf);
  EXPECT_FALSE(ByteCastHandles(half, at::kFloat));
  EXPECT_TRUE(torch::equal(CastWeight(half, at::kFloat), half.to(at::kFloat)));
  const at::Tensor bytes = torch::randint(0, 256, {33}, at::TensorOptions().dtype(at::kByte));
  EXPECT_FALSE(ByteCastHandles(bytes, at::kBFloat16));  // 1 byte, but an integer dtype
  EXPECT_TRUE(torch::equal(CastWeight(bytes, at::kFloat), bytes.to(at::kFloat)));
  EXPECT_EQ(reports_, 0);
}

TEST_F(ByteCastTest, NothingIsHandledOnceTurnedOff) {
  InstallByteCast("", nullptr);
  const at::Tensor half = torch::randn({4}).to(at::kHalf);
  EXPECT_FALSE(ByteCastHandles(half, at::kFloat));
  EXPECT_TRUE(torch::equal(CastWeight(half, at::kFloat), half.to(at::kFloat)));
}

// The GPU half. 1-byte floats exist only in torch >= 2.1: they are found by scanning the
// scalar types (naming them would not compile against torch 1.13). A view at an odd offset
// takes the kernel's unaligned path.
TEST_F(ByteCastTest, OnAGpuTheKernelEqualsTorchForEveryByteAndEveryOneByteFloat) {
  if (!TorchHasCuda() || !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA";
  const auto options = at::TensorOptions().dtype(at::kByte).device(at::kCUDA, 0);
  const at::Tensor all = at::arange(256, options);
  const at::Tensor random = torch::randint(0, 256, {4097}, options);
  int formats = 0;
  for (int type = 0; type < static_cast<int>(at::ScalarType::NumOptions); ++type) {
    const auto source = static_cast<at::ScalarType>(type);
    if (c10::elementSize(source) != 1 || !c10::isFloatingType(source)) continue;
    ++formats;
    for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
      const at::ScalarType bits = dtype == at::kFloat ? at::kInt : at::kShort;
      for (const at::Tensor& bytes : {all, random, random.slice(0, 1, 4097)}) {
        const at::Tensor weight = bytes.view(source);
        ASSERT_TRUE(ByteCastHandles(weight, dtype));
        const at::Tensor ours = CastWeight(weight, dtype);
        EXPECT_TRUE(torch::equal(ours.view(bits), weight.to(dtype).view(bits)))
            << c10::toString(source) << " -> " << c10::toString(dtype);
      }
    }
  }
  EXPECT_GE(formats, 2);  // e4m3fn and e5m2 at least
  EXPECT_EQ(reports_, 0) << last_report_;
}

}  // namespace
}  // namespace ddo::consumer
