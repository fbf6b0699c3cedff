// safetensors load throughput next to a plain sequential read of the same file, in one run.
//
//   io_safetensors_bench [MiB=256] [tensors=64] [dir=/tmp]
//
// Writes a synthetic checkpoint of MiB mebibytes split into `tensors` F32 tensors, then, with
// the file in the page cache (a warm-up read first; dropping caches needs root), measures
// best of 3:
//   read      read(2) of the whole file into a reused 8 MiB buffer (the baseline),
//   mmap      SafetensorsFile::open + memcpy of every tensor out of the mapping (torch-free),
//   copy_to   SafetensorsFile::open + copy_to() of every tensor into a reused buffer (pread),
//   tensors   SafetensorsFile::open + to_tensor() of every tensor (owned at::Tensor, freed
//             after each, as load_weights does),
// and prints GB/s for each with the ratio to the baseline.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "io/safetensors.hpp"
#include "io/tensors.hpp"

namespace fs = std::filesystem;
using namespace yeto::io;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::uint64_t plain_read(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + p.string());
  std::vector<char> buf(8u << 20);
  std::uint64_t total = 0, sum = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n <= 0) break;
    total += static_cast<std::uint64_t>(n);
    sum += static_cast<unsigned char>(buf[0]);
  }
  ::close(fd);
  return total + (sum & 0);
}

std::uint64_t mmap_copy(const fs::path& p) {
  const SafetensorsFile f = SafetensorsFile::open(p);
  std::vector<std::byte> buf;
  std::uint64_t total = 0;
  for (const auto& t : f.tensors()) {
    buf.resize(t.nbytes);
    std::memcpy(buf.data(), f.data(t), t.nbytes);
    total += t.nbytes;
  }
  return total;
}

std::uint64_t pread_copy(const fs::path& p) {
  const SafetensorsFile f = SafetensorsFile::open(p);
  std::vector<std::byte> buf;
  std::uint64_t total = 0;
  for (const auto& t : f.tensors()) {
    buf.resize(t.nbytes);
    f.copy_to(t, buf.data());
    total += t.nbytes;
  }
  return total;
}

std::uint64_t to_tensors(const fs::path& p) {
  const SafetensorsFile f = SafetensorsFile::open(p);
  std::uint64_t total = 0;
  double sink = 0;
  for (const auto& t : f.tensors()) {
    const at::Tensor x = to_tensor(f, t);
    sink += static_cast<double>(x.data_ptr<float>()[0]);
    total += t.nbytes;
  }
  return total + (sink > 1e300 ? 1 : 0);
}

template <typename F>
double best_gbps(F&& f, int reps = 3) {
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    const std::uint64_t bytes = f();
    best = std::max(best, static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t mib = argc > 1 ? std::stoull(argv[1]) : 256;
  const int count = argc > 2 ? std::stoi(argv[2]) : 64;
  const fs::path dir = argc > 3 ? fs::path(argv[3]) : fs::temp_directory_path();
  const fs::path file = dir / ("yeto_io_bench_" + std::to_string(::getpid()) + ".safetensors");

  const std::uint64_t per = (mib << 20) / static_cast<std::uint64_t>(count) / 4 * 4;
  std::vector<std::byte> payload(per);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 31);
  std::vector<SafetensorsEntry> entries;
  for (int i = 0; i < count; ++i)
    entries.push_back({"blocks." + std::to_string(i) + ".weight", DType::F32,
                       {static_cast<std::int64_t>(per / 4)}, payload});
  write_safetensors(file, entries, {{"format", "pt"}});
  const double gb = static_cast<double>(fs::file_size(file)) / 1e9;

  plain_read(file);  // warm the page cache
  const double read_gbps = best_gbps([&] { return plain_read(file); });
  const double mmap_gbps = best_gbps([&] { return mmap_copy(file); });
  const double pread_gbps = best_gbps([&] { return pread_copy(file); });
  const double tensor_gbps = best_gbps([&] { return to_tensors(file); });
  fs::remove(file);

  std::printf("safetensors load: %.3f GB in %d tensors (warm page cache, best of 3)\n", gb, count);
  std::printf("  %-34s %8.2f GB/s  (baseline)\n", "plain sequential read(2)", read_gbps);
  std::printf("  %-34s %8.2f GB/s  ratio %.2f\n", "open + mmap copy of every tensor", mmap_gbps, mmap_gbps / read_gbps);
  std::printf("  %-34s %8.2f GB/s  ratio %.2f\n", "open + copy_to() of every tensor", pread_gbps, pread_gbps / read_gbps);
  std::printf("  %-34s %8.2f GB/s  ratio %.2f\n", "open + to_tensor() of every tensor", tensor_gbps,
              tensor_gbps / read_gbps);
  return 0;
}
