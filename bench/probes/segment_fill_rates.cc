// File: bench/probes/segment_fill_rates.cc
//
// A probe, not part of the build: ways to fill shared memory from a page-cache-warm file and
// to page-lock it, each timed on its own (issue 33, item 3: which of them bounds a cold load).
// A: populate with T threads, then pread into the mapping (ddod before 2026-12-06);
// B: pread into an already populated mapping (what a pre-faulted reserve would give);
// C: cudaHostRegister of a populated segment; D: pread into a bounce buffer and pwrite
// through the segment's descriptor (ddod's write path since 2026-12-06), 1 and 8 files;
// E/F: registering after D, whole and per part, and a copy across two registrations;
// G/H: memcpy bounds. Build and run on the device machine (bench/results/2026-12-07/run69-*):
//   g++ -O2 -std=c++17 -pthread -include cstring -I/usr/local/cuda/include \
//     segment_fill_rates.cc -o segment_fill_rates -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt
//   head -c 2G /dev/urandom > /tmp/lb.bin && ./segment_fill_rates /tmp/lb.bin 16
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>
using clk = std::chrono::steady_clock;
static double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }
static off_t kChunk = 64 << 20;
template <class F> void par(int T, off_t size, F f) {
  std::atomic<off_t> next{0}; std::vector<std::thread> th;
  for (int t = 0; t < T; ++t) th.emplace_back([&] { for (off_t c = next++; c * kChunk < size; c = next++) f(c * kChunk, std::min(kChunk, size - c * kChunk)); });
  for (auto& x : th) x.join();
}
struct Seg { std::vector<int> fds; std::vector<std::string> names; char* map; off_t size; off_t part; };
Seg make(off_t size, int files, char* at = nullptr) {
  Seg s; s.size = size; s.part = size / files;
  s.map = (char*)mmap(at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  for (int i = 0; i < files; ++i) {
    std::string n = "/lb-" + std::to_string(getpid()) + "-" + std::to_string(i) + "-" + std::to_string(rand());
    int fd = shm_open(n.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600); ftruncate(fd, s.part);
    mmap(s.map + i * s.part, s.part, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    madvise(s.map + i * s.part, s.part, MADV_HUGEPAGE);
    s.fds.push_back(fd); s.names.push_back(n);
  }
  return s;
}
void drop(Seg& s) { munmap(s.map, s.size); for (size_t i = 0; i < s.fds.size(); ++i) { close(s.fds[i]); shm_unlink(s.names[i].c_str()); } }
int main(int argc, char** argv) {
  const char* src = argv[1]; int T = atoi(argv[2]);
  int sfd = open(src, O_RDONLY); off_t size = lseek(sfd, 0, SEEK_END) & ~((off_t(1) << 30) - 1);
  std::vector<char> warm(64 << 20); for (off_t o = 0; o < size; o += warm.size()) pread(sfd, warm.data(), warm.size(), o);
  auto report = [&](const char* what, double s) { printf("%-58s %7.3f s %7.2f GB/s\n", what, s, size / s / 1e9); fflush(stdout); };
  for (int rep = 0; rep < 1; ++rep) {
    { Seg s = make(size, 1); auto t = clk::now();
      par(T, size, [&](off_t o, off_t n) { madvise(s.map + o, n, MADV_POPULATE_WRITE); }); double a = secs(t);
      par(T, size, [&](off_t o, off_t n) { for (off_t d = 0; d < n;) d += pread(sfd, s.map + o + d, n - d, o + d); });
      report("A populate(T) then pread into mapping (today)", secs(t)); printf("    of which populate %.3f s\n", a);
      t = clk::now(); par(T, size, [&](off_t o, off_t n) { for (off_t d = 0; d < n;) d += pread(sfd, s.map + o + d, n - d, o + d); });
      report("B pread into populated mapping (a reserve)", secs(t));
      t = clk::now(); cudaError_t e = cudaHostRegister(s.map, size, cudaHostRegisterPortable); report(e ? "C cudaHostRegister FAILED" : "C cudaHostRegister of the populated segment", secs(t));
      t = clk::now(); cudaHostUnregister(s.map); report("C' cudaHostUnregister", secs(t));
      drop(s); }
    for (int files : {1, 8}) {
      Seg s = make(size, files); auto t = clk::now();
      par(T, size, [&](off_t o, off_t n) { static thread_local char* b = (char*)aligned_alloc(4096, 1 << 20); int fd = s.fds[o / s.part]; off_t fo = o % s.part;
        for (off_t d = 0; d < n; d += 1 << 20) { pread(sfd, b, 1 << 20, o + d); pwrite(fd, b, 1 << 20, fo + d); } });
      double w = secs(t);
      par(T, size, [&](off_t o, off_t n) { madvise(s.map + o, n, MADV_POPULATE_WRITE); });
      char label[100]; snprintf(label, sizeof label, "D pread->bounce->pwrite, %d file(s), then map", files); report(label, secs(t)); printf("    of which write %.3f s\n", w);
      t = clk::now(); cudaError_t e = cudaHostRegister(s.map, size, cudaHostRegisterPortable); report(e ? "E register FAILED" : "E cudaHostRegister whole (several files ok?)", secs(t));
      if (!e) cudaHostUnregister(s.map);
      if (files > 1) {  // parallel registration of the parts
        t = clk::now(); std::vector<std::thread> th; std::atomic<int> bad{0};
        for (int i = 0; i < files; ++i) th.emplace_back([&, i] { if (cudaHostRegister(s.map + i * s.part, s.part, cudaHostRegisterPortable)) bad++; });
        for (auto& x : th) x.join(); report(bad ? "F parallel per-part register FAILED" : "F parallel per-part register", secs(t));
        // a copy straddling two registrations
        void* dev; cudaMalloc(&dev, 256 << 20); cudaStream_t st; cudaStreamCreate(&st);
        char* mid = s.map + s.part - (128 << 20);
        cudaMemcpyAsync(dev, mid, 256 << 20, cudaMemcpyHostToDevice, st); cudaStreamSynchronize(st);
        auto t2 = clk::now(); for (int k = 0; k < 20; ++k) cudaMemcpyAsync(dev, mid, 256 << 20, cudaMemcpyHostToDevice, st);
        e = cudaStreamSynchronize(st); printf("    copy straddling two registrations: %s %.2f GB/s\n", cudaGetErrorName(e), 20.0 * (256 << 20) / secs(t2) / 1e9);
        t2 = clk::now(); for (int k = 0; k < 20; ++k) cudaMemcpyAsync(dev, s.map, 256 << 20, cudaMemcpyHostToDevice, st);
        e = cudaStreamSynchronize(st); printf("    copy within one registration: %s %.2f GB/s\n", cudaGetErrorName(e), 20.0 * (256 << 20) / secs(t2) / 1e9);
        cudaFree(dev); for (int i = 0; i < files; ++i) cudaHostUnregister(s.map + i * s.part);
      }
      drop(s);
    }
    { std::vector<char> a(size), b(size); memset(a.data(), 1, size); memset(b.data(), 2, size);
      auto t = clk::now(); memcpy(b.data(), a.data(), size); report("G memcpy one thread (faulted)", secs(t));
      t = clk::now(); par(T, size, [&](off_t o, off_t n) { memcpy(b.data() + o, a.data() + o, n); }); report("H memcpy T threads", secs(t)); }
  }
  printf("THP shmem: "); fflush(stdout); system("cat /sys/kernel/mm/transparent_hugepage/shmem_enabled; grep -i huge /proc/meminfo | head -3; df -h /tmp | tail -1; cat /proc/cpuinfo | grep 'model name' | head -1");
}
