// File: client-cpp/src/consumer/kernels/byte_cast.cu
//
// Casts a contiguous tensor of 1-byte elements (fp8 of any format) to 2-byte (bf16, fp16) or
// 4-byte (fp32) elements through a 256-entry table: table[b] is the output bit pattern of the
// input byte b. The caller builds the table with torch itself
// (arange(256, uint8).view(src).to(dst)), so the result is bitwise torch's conversion, NaNs
// included, for every 1-byte float format. Why a kernel of our own: torch's fp8 -> bf16 cast
// runs its generic unvectorized copy kernel at about 880 GB/s on an H100, half of what a
// vectorized one does (docs/streaming.md, "Stored dtypes (fp8) and own forwards").
//
// Each thread converts 16 input bytes per iteration (one 16-byte load when the input is
// 16-byte aligned, else 16 byte loads) into two (2-byte) or four (4-byte) 16-byte stores,
// in a grid-stride loop; the last n % 16 elements go one by one. `out` must be 16-byte
// aligned (the caller allocates it). The table is copied into shared memory first.
//
// Compiled to PTX only (tools/gen_byte_cast_ptx.sh), which the client loads with the driver
// (cuModuleLoadData): no CUDA runtime, no compiler on a user's machine. Keep it to plain
// loads and stores so that the lowered PTX ISA version there stays valid.

namespace {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// The 16 input bytes of chunk `chunk` as four little-endian words.
__device__ __forceinline__ uint4 LoadChunk(const u8* __restrict__ in, u64 chunk, bool aligned) {
  if (aligned) return reinterpret_cast<const uint4*>(in)[chunk];
  const u8* bytes = in + chunk * 16;
  u32 words[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    words[w] = static_cast<u32>(bytes[4 * w]) | (static_cast<u32>(bytes[4 * w + 1]) << 8) |
               (static_cast<u32>(bytes[4 * w + 2]) << 16) |
               (static_cast<u32>(bytes[4 * w + 3]) << 24);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Two table entries packed into one word (first in the low half: little-endian order).
__device__ __forceinline__ u32 Pair(const u16* table, u32 word, int shift) {
  return static_cast<u32>(table[(word >> shift) & 0xff]) |
         (static_cast<u32>(table[(word >> (shift + 8)) & 0xff]) << 16);
}

// Copies the global table into shared memory.
template <typename T>
__device__ __forceinline__ void LoadTable(T* shared, const T* __restrict__ table) {
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) shared[i] = table[i];
  __syncthreads();
}

}  // namespace

extern "C" __global__ void ddo_byte_cast_u16(const u8* __restrict__ in, u16* __restrict__ out,
                                             const u16* __restrict__ table, u64 n) {
  __shared__ u16 lut[256];
  LoadTable(lut, table);
  const bool aligned = (reinterpret_cast<u64>(in) & 15) == 0;
  const u64 chunks = n / 16;
  const u64 first = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const u64 stride = static_cast<u64>(gridDim.x) * blockDim.x;
  uint4* out4 = reinterpret_cast<uint4*>(out);
  for (u64 chunk = first; chunk < chunks; chunk += stride) {
    const uint4 v = LoadChunk(in, chunk, aligned);
    out4[2 * chunk] = make_uint4(Pair(lut, v.x, 0), Pair(lut, v.x, 16), Pair(lut, v.y, 0),
                                 Pair(lut, v.y, 16));
    out4[2 * chunk + 1] = make_uint4(Pair(lut, v.z, 0), Pair(lut, v.z, 16), Pair(lut, v.w, 0),
                                     Pair(lut, v.w, 16));
  }
  for (u64 i = chunks * 16 + first; i < n; i += stride) out[i] = lut[in[i]];
}

extern "C" __global__ void ddo_byte_cast_u32(const u8* __restrict__ in, u32* __restrict__ out,
                                             const u32* __restrict__ table, u64 n) {
  __shared__ u32 lut[256];
  LoadTable(lut, table);
  const bool aligned = (reinterpret_cast<u64>(in) & 15) == 0;
  const u64 chunks = n / 16;
  const u64 first = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const u64 stride = static_cast<u64>(gridDim.x) * blockDim.x;
  uint4* out4 = reinterpret_cast<uint4*>(out);
  for (u64 chunk = first; chunk < chunks; chunk += stride) {
    const uint4 v = LoadChunk(in, chunk, aligned);
    const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      out4[4 * chunk + w] = make_uint4(lut[words[w] & 0xff], lut[(words[w] >> 8) & 0xff],
                                       lut[(words[w] >> 16) & 0xff], lut[words[w] >> 24]);
    }
  }
  for (u64 i = chunks * 16 + first; i < n; i += stride) out[i] = lut[in[i]];
}
