// Mutation tests for the other untrusted containers: the weights-only pickle VM, the zip
// reader under .pt files and the .npy parser. Every mutant must be rejected with a yeto::Error
// or parsed; never a crash or an out-of-bounds read (run under AddressSanitizer, label asan).
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <random>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "io/npy.hpp"
#include "io/pickle.hpp"
#include "io/zip_archive.hpp"
#include "io_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace yeto::io;

namespace {

fs::path fx(const std::string& n) { return yeto::test::io_fixtures() / "io" / n; }

std::string mutate(std::string m, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !m.empty(); ++e) {
    const std::size_t at = rng() % m.size();
    switch (rng() % 4) {
      case 0: m[at] = static_cast<char>(rng()); break;
      case 1: m.erase(at, 1 + rng() % 3); break;
      case 2: m.insert(at, 1, static_cast<char>(rng())); break;
      case 3: m[at] ^= static_cast<char>(1 << (rng() % 8)); break;
    }
  }
  return m;
}

std::string pickle_of(const std::string& pt) {
  const ZipArchive z = ZipArchive::open(fx(pt));
  for (const auto& e : z.entries())
    if (e.name.size() >= 8 && e.name.substr(e.name.size() - 8) == "data.pkl") return std::string(z.read(e));
  return "";
}

}  // namespace

TEST(ContainerFuzz, PickleProgramsAreRefusedOrParsed) {
  std::mt19937_64 rng(1);
  std::size_t cases = 0, rejected = 0;
  for (const char* f : {"state_dict.pt", "nested.pt", "views.pt", "dtypes.pt", "tuple.pt", "parameter.pt", "evil.pt"}) {
    const std::string good = pickle_of(f);
    ASSERT_FALSE(good.empty()) << f;
    auto run = [&](const std::string& p) {
      ++cases;
      try {
        const PickleResult r = unpickle_weights_only(p, f);
        EXPECT_NE(r.root, nullptr);
      } catch (const yeto::Error& e) {
        EXPECT_EQ(e.code(), yeto::ExitCode::bad_input) << e.what();
        ++rejected;
      }
    };
    for (std::size_t n = 0; n < good.size(); ++n) run(good.substr(0, n));
    for (int i = 0; i < 600; ++i) run(mutate(good, rng));
  }
  std::cout << "[fuzz] pickle programs: " << cases << " (" << rejected << " refused)\n";
  EXPECT_GT(rejected, cases / 2);
}

TEST(ContainerFuzz, ZipArchivesAreRefusedOrRead) {
  yeto::test::TempDir t;
  std::mt19937_64 rng(2);
  const std::string good = yeto::read_file(fx("state_dict.pt"));
  std::size_t cases = 0, rejected = 0;
  for (int i = 0; i < 400; ++i) {
    std::string m = i < 100 ? good.substr(0, rng() % good.size()) : mutate(good, rng);
    const fs::path p = t.write("m" + std::to_string(i) + ".pt", m);
    ++cases;
    try {
      const ZipArchive z = ZipArchive::open(p);
      for (const auto& e : z.entries()) {
        try {
          const std::string_view b = z.read(e);
          std::size_t sum = 0;
          for (char c : b) sum += static_cast<unsigned char>(c);
          (void)sum;
        } catch (const yeto::Error&) {
        }
      }
    } catch (const yeto::Error& e) {
      EXPECT_EQ(e.code(), yeto::ExitCode::bad_input) << e.what();
      ++rejected;
    }
  }
  std::cout << "[fuzz] zip archives: " << cases << " (" << rejected << " refused)\n";
  EXPECT_GT(rejected, 50u);
}

TEST(ContainerFuzz, NpyFilesAreRefusedOrParsed) {
  std::mt19937_64 rng(3);
  std::size_t cases = 0, rejected = 0;
  for (const char* f : {"f32.npy", "f64_fortran.npy", "v2.npy", "f32_big_endian.npy", "object.npy"}) {
    const std::string good = yeto::read_file(fx(f));
    for (int i = 0; i < 500; ++i) {
      ++cases;
      try {
        const NpyArray a = parse_npy(mutate(good, rng), f);
        EXPECT_EQ(a.data.size(), a.numel() * dtype_size(a.dtype));
      } catch (const yeto::Error& e) {
        EXPECT_EQ(e.code(), yeto::ExitCode::bad_input) << e.what();
        ++rejected;
      }
    }
  }
  std::cout << "[fuzz] npy files: " << cases << " (" << rejected << " refused)\n";
  EXPECT_GT(rejected, cases / 2);
}
