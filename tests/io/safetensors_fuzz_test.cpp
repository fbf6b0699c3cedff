// Mutation tests for the safetensors reader: thousands of truncated, overlapping, oversized and
// mistyped files, each of which must be rejected with a yeto::Error (never a crash or an
// out-of-bounds read), and random mutants, each of which must be either rejected or accepted
// with every invariant holding. Files are validated from exactly-sized heap buffers so that an
// AddressSanitizer build (ctest label `asan`) catches any read past the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "support/temp_dir.hpp"

using namespace yeto::io;
using nlohmann::json;

namespace {

struct Outcome {
  bool accepted = false;
  std::string error;
};

// Validates and, when accepted, touches every byte of every tensor and checks the invariants.
Outcome check(const std::string& bytes) {
  Outcome o;
  try {
    const SafetensorsFile f = SafetensorsFile::from_bytes(bytes, "fuzz.safetensors");
    std::uint64_t covered = 0, sum = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (const auto& t : f.tensors()) {
      EXPECT_LE(t.offset + t.nbytes, f.data_size());
      std::uint64_t n = dtype_size(t.dtype);
      for (auto d : t.shape) {
        EXPECT_GE(d, 0);
        n *= static_cast<std::uint64_t>(d);
      }
      EXPECT_EQ(n, t.nbytes) << t.name;
      const auto b = f.bytes(t);
      for (std::byte x : b) sum += static_cast<unsigned>(x);
      spans.emplace_back(t.offset, t.offset + t.nbytes);
      covered += t.nbytes;
    }
    std::sort(spans.begin(), spans.end());
    std::uint64_t pos = 0;
    for (const auto& [b, e] : spans) {
      EXPECT_EQ(b, pos);
      pos = e;
    }
    EXPECT_EQ(covered, f.data_size());
    EXPECT_EQ(8 + f.header_size() + f.data_size(), bytes.size());
    (void)sum;
    o.accepted = true;
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::bad_input) << e.what();
    EXPECT_NE(std::string(e.what()).find("fuzz.safetensors"), std::string::npos) << e.what();
    o.error = e.what();
  }
  return o;
}

std::string prefix_len(std::uint64_t n) {
  std::string p(8, '\0');
  for (int i = 0; i < 8; ++i) p[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return p;
}

std::string file_of(const std::string& header, const std::string& data) {
  return prefix_len(header.size()) + header + data;
}

// A valid file of several dtypes, shapes and a zero-size tensor.
std::string base_file() {
  std::vector<std::vector<std::byte>> store;
  std::vector<SafetensorsEntry> e;
  auto add = [&](const std::string& name, DType d, std::vector<std::int64_t> shape) {
    std::uint64_t n = dtype_size(d);
    for (auto s : shape) n *= static_cast<std::uint64_t>(s);
    std::vector<std::byte> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>(i * 7 + name.size());
    store.push_back(std::move(b));
    e.push_back({name, d, shape, store.back()});
  };
  store.reserve(8);
  add("w.f32", DType::F32, {3, 4});
  add("w.bf16", DType::BF16, {5});
  add("ids", DType::I64, {2, 2});
  add("mask", DType::BOOL, {7});
  add("empty", DType::F16, {0, 3});
  add("f8", DType::F8_E4M3, {3});
  return serialize_safetensors(e, {{"format", "pt"}});
}

std::size_t g_cases = 0, g_rejected = 0;

void expect_rejected(const std::string& bytes, const std::string& what) {
  ++g_cases;
  const Outcome o = check(bytes);
  EXPECT_FALSE(o.accepted) << what;
  if (!o.accepted) ++g_rejected;
}

// Independent reference for generated headers: is this header valid for data_size bytes?
struct GenTensor {
  std::string name, dtype;
  std::vector<long long> shape;
  long long begin = 0, end = 0;
};

bool reference_valid(const std::vector<GenTensor>& ts, std::uint64_t data_size) {
  std::vector<std::pair<unsigned long long, unsigned long long>> spans;
  for (const auto& t : ts) {
    const auto d = parse_dtype(t.dtype);
    if (!d || t.name.empty() || t.name == "__metadata__") return false;
    if (t.begin < 0 || t.end < 0 || t.begin > t.end) return false;
    unsigned long long n = dtype_size(*d);
    for (auto s : t.shape) {
      if (s < 0) return false;
      if (__builtin_mul_overflow(n, static_cast<unsigned long long>(s), &n)) return false;
    }
    if (static_cast<unsigned long long>(t.end) > data_size) return false;
    if (n != static_cast<unsigned long long>(t.end - t.begin)) return false;
    spans.emplace_back(t.begin, t.end);
  }
  std::sort(spans.begin(), spans.end());
  unsigned long long pos = 0;
  for (const auto& [b, e] : spans) {
    if (b != pos) return false;
    pos = e;
  }
  return pos == data_size;
}

}  // namespace

TEST(SafetensorsFuzz, EveryTruncationIsRejected) {
  const std::string good = base_file();
  ASSERT_TRUE(check(good).accepted);
  for (std::size_t n = 0; n < good.size(); ++n) expect_rejected(good.substr(0, n), "truncated to " + std::to_string(n));
  // Extra bytes after the data area are rejected as well.
  for (std::size_t n = 1; n <= 64; ++n) expect_rejected(good + std::string(n, '\0'), "padded by " + std::to_string(n));
}

TEST(SafetensorsFuzz, HugeAndWrongHeaderLengths) {
  const std::string good = base_file();
  const std::uint64_t real = good.size() >= 8 ? [&] {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(good[static_cast<std::size_t>(i)]);
    return v;
  }() : 0;
  std::vector<std::uint64_t> lengths;
  for (int b = 0; b < 64; ++b) {
    lengths.push_back(1ull << b);
    lengths.push_back((1ull << b) - 1);
    lengths.push_back((1ull << b) + 1);
  }
  lengths.push_back(~0ull);
  lengths.push_back(~0ull - 7);
  for (int d = -64; d <= 64; ++d) lengths.push_back(real + static_cast<std::uint64_t>(static_cast<std::int64_t>(d)));
  for (std::uint64_t len : lengths) {
    if (len == real) continue;
    std::string m = good;
    m.replace(0, 8, prefix_len(len));
    expect_rejected(m, "header length " + std::to_string(len));
  }
}

TEST(SafetensorsFuzz, GeneratedHeadersMatchAReferenceOracle) {
  std::mt19937_64 rng(20261201);
  auto pick = [&](std::uint64_t n) { return static_cast<std::uint64_t>(rng() % n); };
  const std::vector<std::string> bad_dtypes = {"", "f32", "F31", "FLOAT", "U16", "U32", "U64", "C64", "F8", "F8_E4M3FN",
                                               "bf16", "BOOL ", "\xff\xfe", "I128", "F32\x01"};
  std::size_t accepted = 0, rejected = 0, overlapping = 0, bad_dtype = 0, out_of_bounds = 0;
  const int N = 6000;
  for (int i = 0; i < N; ++i) {
    const int count = 1 + static_cast<int>(pick(5));
    std::vector<GenTensor> ts;
    long long pos = 0;
    for (int k = 0; k < count; ++k) {
      GenTensor t;
      t.name = "t" + std::to_string(k);
      const auto& all = all_dtypes();
      const DType d = all[pick(all.size())];
      t.dtype = dtype_name(d);
      const int rank = static_cast<int>(pick(4));
      long long n = static_cast<long long>(dtype_size(d));
      for (int r = 0; r < rank; ++r) {
        const long long s = pick(20) == 0 ? 0 : 1 + static_cast<long long>(pick(5));
        t.shape.push_back(s);
        n *= s;
      }
      t.begin = pos;
      t.end = pos + n;
      pos = t.end;
      ts.push_back(t);
    }
    std::uint64_t data_size = static_cast<std::uint64_t>(pos);
    // Apply one to three corruptions.
    const int muts = static_cast<int>(pick(4));
    for (int m = 0; m < muts; ++m) {
      GenTensor& t = ts[pick(ts.size())];
      switch (pick(11)) {
        case 0: t.dtype = bad_dtypes[pick(bad_dtypes.size())]; ++bad_dtype; break;
        case 1: t.begin -= 1 + static_cast<long long>(pick(4)); ++overlapping; break;  // overlaps the previous one
        case 2: t.end += 1 + static_cast<long long>(pick(8)); ++out_of_bounds; break;
        case 3: std::swap(t.begin, t.end); break;
        case 4: if (!t.shape.empty()) t.shape[pick(t.shape.size())] += pick(2) ? 1 : -1; break;
        case 5: t.shape.push_back(static_cast<long long>(1ull << 62)); t.shape.push_back(8); break;  // overflow
        case 6: data_size += 1 + pick(16); break;  // trailing bytes
        case 7: if (data_size) data_size -= 1 + pick(std::min<std::uint64_t>(data_size, 8)); break;  // truncated data
        case 8: t.begin = t.end = static_cast<long long>(1ull << 62); break;  // huge offsets
        case 9: t.name = ts[0].name; break;  // duplicate name (rejected by the parser)
        case 10: ts[pick(ts.size())] = t; break;  // full duplicate entry
      }
    }
    bool duplicate = false;
    for (std::size_t a = 0; a < ts.size(); ++a)
      for (std::size_t b = a + 1; b < ts.size(); ++b) duplicate = duplicate || ts[a].name == ts[b].name;
    std::string header = "{";
    if (pick(2)) header += "\"__metadata__\":{\"format\":\"pt\"},";
    for (std::size_t k = 0; k < ts.size(); ++k) {
      const auto& t = ts[k];
      json shape = t.shape;
      header += json(t.name).dump() + ":{\"dtype\":" + json(t.dtype).dump(-1, ' ', false, json::error_handler_t::replace) +
                ",\"shape\":" + shape.dump() + ",\"data_offsets\":[" + std::to_string(t.begin) + "," +
                std::to_string(t.end) + "]}" + (k + 1 < ts.size() ? "," : "");
    }
    header += "}";
    header.append(pick(8), ' ');
    std::string data(data_size, '\x5a');
    const bool expected = !duplicate && reference_valid(ts, data_size);
    ++g_cases;
    const Outcome o = check(file_of(header, data));
    EXPECT_EQ(o.accepted, expected) << header << " data " << data_size << ": " << o.error;
    if (o.accepted) ++accepted;
    else {
      ++rejected;
      ++g_rejected;
    }
  }
  std::cout << "[fuzz] generated headers: " << N << " (" << accepted << " valid accepted, " << rejected
            << " invalid rejected; mutations: " << overlapping << " overlaps, " << bad_dtype << " bad dtypes, "
            << out_of_bounds << " out-of-bounds ends)\n";
  EXPECT_GT(rejected, static_cast<std::size_t>(N / 3));
  EXPECT_GT(accepted, static_cast<std::size_t>(N / 10));
}

TEST(SafetensorsFuzz, RandomByteMutantsAreRejectedOrConsistent) {
  const std::string good = base_file();
  std::mt19937_64 rng(42);
  std::size_t accepted = 0, rejected = 0;
  const int N = 6000;
  for (int i = 0; i < N; ++i) {
    std::string m = good;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % m.size();
      switch (rng() % 5) {
        case 0: m[at] = static_cast<char>(rng()); break;
        case 1: m[at] = "{}[]\":,0123456789-.eE \\"[rng() % 24]; break;
        case 2: m.erase(at, 1 + rng() % 4); break;
        case 3: m.insert(at, 1, "{}[]\":,09"[rng() % 9]); break;
        case 4: m[at] ^= static_cast<char>(1 << (rng() % 8)); break;
      }
      if (m.empty()) m = "x";
    }
    ++g_cases;
    const Outcome o = check(m);
    if (o.accepted) ++accepted;
    else {
      ++rejected;
      ++g_rejected;
    }
  }
  std::cout << "[fuzz] random byte mutants: " << N << " (" << rejected << " rejected, " << accepted
            << " still valid, e.g. data-byte edits)\n";
  EXPECT_GT(rejected, static_cast<std::size_t>(N / 2));
}

TEST(SafetensorsFuzz, StructuralGarbageAndNesting) {
  std::mt19937_64 rng(7);
  const std::vector<std::string> tokens = {"{", "}", "[", "]", ",", ":", "\"a\"", "\"dtype\"", "\"shape\"",
                                           "\"data_offsets\"", "\"F32\"", "0", "4", "-1", "1e999", "null", "true",
                                           "\"__metadata__\"", "18446744073709551616", "\"\\u0000\""};
  const int N = 3000;
  for (int i = 0; i < N; ++i) {
    std::string h = "{";
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) h += tokens[rng() % tokens.size()];
    ++g_cases;
    if (!check(file_of(h, std::string(rng() % 8, 'x'))).accepted) ++g_rejected;
  }
  for (int depth : {2, 3, 10, 1000, 100000}) {
    expect_rejected(file_of("{\"a\":" + std::string(depth, '[') + std::string(depth, ']') + "}", ""), "nested arrays");
    std::string objs;
    for (int k = 0; k < depth; ++k) objs += "{\"k\":";
    expect_rejected(file_of("{\"a\":" + objs, ""), "nested objects");
  }
  std::cout << "[fuzz] total: " << g_cases << " cases, " << g_rejected << " rejected, none crashed\n";
}

TEST(SafetensorsFuzz, MappedFilesOnDisk) {
  yeto::test::TempDir t;
  const std::string good = base_file();
  std::mt19937_64 rng(99);
  for (int i = 0; i < 200; ++i) {
    std::string m = good.substr(0, rng() % (good.size() + 1));
    if (i % 2 && !m.empty()) m[rng() % m.size()] = static_cast<char>(rng());
    const auto p = t.write("f" + std::to_string(i) + ".safetensors", m);
    try {
      const auto f = SafetensorsFile::open(p);
      for (const auto& info : f.tensors()) EXPECT_LE(info.offset + info.nbytes, f.data_size());
    } catch (const yeto::Error& e) {
      EXPECT_EQ(e.code(), yeto::ExitCode::bad_input);
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos);
    }
  }
}
