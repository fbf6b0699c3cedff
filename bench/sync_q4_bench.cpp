// q4 and q2 pseudo-gradient quantisation and the syncer's merge math, each next to a memcpy of the
// same bytes measured in the same run (so the ratio, not the absolute number, is the result).
//   sync_q4_bench [numel=16777216] [block=64] [learners=4]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/tensorboard.hpp"
#include "sync/merge.hpp"
#include "sync/protocol.hpp"
#include "sync/quant.hpp"

namespace ys = yeto::sync;

namespace {
template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
volatile float sink;
}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (16u << 20);
  const std::uint32_t block = argc > 2 ? static_cast<std::uint32_t>(std::atoi(argv[2])) : 64;
  const int learners = argc > 3 ? std::atoi(argv[3]) : 4;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1e-3f);
  std::vector<float> x(n), y(n), dst(n);
  for (auto& v : x) v = nd(rng);
  const double gb = static_cast<double>(n) * 4 / 1e9;
  const int reps = 5;

  const double t_copy = best_seconds(reps, [&] { std::memcpy(dst.data(), x.data(), n * 4); sink = dst[n / 2]; });
  std::vector<float> scales(ys::q4_blocks(n, block));
  std::vector<std::uint8_t> codes((n + 1) / 2);
  const double t_enc = best_seconds(reps, [&] { ys::q4_encode_into(x, block, scales.data(), codes.data()); });
  const double t_dec = best_seconds(reps, [&] { ys::q4_decode_into(n, block, scales.data(), codes.data(), y); sink = y[7]; });
  // Every implementation this CPU has, side by side with the default one and memcpy; each
  // must give the same bytes and values.
  struct Row {
    ys::Q4Impl impl;
    double enc, dec;
  };
  std::vector<Row> rows;
  for (const ys::Q4Impl impl : {ys::Q4Impl::scalar, ys::Q4Impl::sse2, ys::Q4Impl::avx2}) {
    if (!ys::q4_impl_available(impl)) continue;
    std::vector<float> scales_i(scales.size()), y_i(n);
    std::vector<std::uint8_t> codes_i(codes.size());
    const double te = best_seconds(reps, [&] { ys::q4_encode_into(x, block, scales_i.data(), codes_i.data(), impl); });
    const double td = best_seconds(reps, [&] {
      ys::q4_decode_into(n, block, scales.data(), codes.data(), y_i, impl);
      sink = y_i[7];
    });
    if (scales_i != scales || codes_i != codes || std::memcmp(y_i.data(), y.data(), n * 4) != 0) {
      std::fprintf(stderr, "q4: implementation %s disagrees with the default one\n", ys::q4_impl_name(impl));
      return 1;
    }
    rows.push_back({impl, te, td});
  }
  // q2 (sync.uplink / sync.downlink = q2) at the same block, and the error energy each code leaves.
  std::vector<float> scales2(scales.size()), y2(n);
  std::vector<std::uint8_t> codes2((n + 3) / 4);
  const double t_enc2 = best_seconds(reps, [&] { ys::q2_encode_into(x, block, scales2.data(), codes2.data()); });
  const double t_dec2 = best_seconds(reps, [&] { ys::q2_decode_into(n, block, scales2.data(), codes2.data(), y2); sink = y2[7]; });
  double max_err = 0, e4 = 0, e2 = 0, energy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_err = std::max(max_err, static_cast<double>(std::fabs(x[i] - y[i])));
    e4 += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
    e2 += (x[i] - y2[i]) * static_cast<double>(x[i] - y2[i]);
    energy += x[i] * static_cast<double>(x[i]);
  }

  std::printf("sync q4: %zu float32 values (%.1f MB), block %u, best of %d\n", n, gb * 1e3, block, reps);
  std::printf("  memcpy            %7.2f GB/s  (baseline)\n", gb / t_copy);
  std::printf("  q4 encode         %7.2f GB/s  (%.2fx memcpy)  -> %.1f MB on the wire (%.2f bits/value)\n",
              gb / t_enc, t_copy / t_enc, (scales.size() * 4 + codes.size()) / 1e6,
              8.0 * (scales.size() * 4 + codes.size()) / static_cast<double>(n));
  std::printf("  q4 decode         %7.2f GB/s  (%.2fx memcpy)  max |error| %.3g, error energy %.4f of the values\n",
              gb / t_dec, t_copy / t_dec, max_err, e4 / energy);
  std::printf("  q2 encode         %7.2f GB/s  (%.2fx memcpy)  -> %.1f MB on the wire (%.2f bits/value)\n",
              gb / t_enc2, t_copy / t_enc2, (scales2.size() * 4 + codes2.size()) / 1e6,
              8.0 * (scales2.size() * 4 + codes2.size()) / static_cast<double>(n));
  std::printf("  q2 decode         %7.2f GB/s  (%.2fx memcpy)  error energy %.4f of the values\n", gb / t_dec2,
              t_copy / t_dec2, e2 / energy);
  std::printf("  (default: %s; every implementation below gives the same bytes)\n", ys::q4_impl_name(ys::q4_best_impl()));
  for (const Row& r : rows)
    std::printf("  q4 %-6s encode %7.2f GB/s (%.2fx memcpy), decode %7.2f GB/s (%.2fx memcpy)\n",
                ys::q4_impl_name(r.impl), gb / r.enc, t_copy / r.enc, gb / r.dec, t_copy / r.dec);

  // Per-byte costs of a bulk frame: the CRC-32C every frame carries, sealing (XChaCha20-Poly1305
  // straight into the frame, then the CRC) and opening (CRC in the decoder, then decryption in
  // place).
  const std::string_view bytes(reinterpret_cast<const char*>(x.data()), n * 4);
  const double t_crc = best_seconds(3, [&] { sink = static_cast<float>(yeto::crc32c(bytes)); });
  const ys::Key key = ys::run_key_from_secret("bench-secret-0123456789abcdef");
  ys::Session sess(key, 'S', 'L');
  std::string sealed;
  const double t_seal = best_seconds(3, [&] {
    sealed = sess.seal(ys::MsgType::fragment, 1, bytes);
    sink = static_cast<float>(sealed.size());
  });
  // Opening: each round seals a fresh frame outside the timing, then decodes and opens it.
  double t_open = 1e30;
  ys::Session tx(key, 'S', 'L'), rx(key, 'L', 'S');
  for (int i = 0; i < 3; ++i) {
    std::string frame = tx.seal(ys::MsgType::fragment, 1, bytes);
    const auto t0 = std::chrono::steady_clock::now();
    ys::FrameDecoder dec(1, frame.size());
    dec.feed(frame.data(), frame.size());
    const std::string plain = rx.open(std::move(*dec.next()));
    t_open = std::min(t_open, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (plain.size() != bytes.size() || std::memcmp(plain.data(), bytes.data(), 64) != 0) std::abort();
  }
  std::printf("  frame CRC-32C     %7.2f GB/s  (%.2fx memcpy; yeto::crc32c)\n", gb / t_crc, t_copy / t_crc);
  std::printf("  seal (AEAD+CRC)   %7.2f GB/s  (%.2fx memcpy; what every fragment broadcast costs per learner)\n",
              gb / t_seal, t_copy / t_seal);
  std::printf("  decode+open       %7.2f GB/s  (%.2fx memcpy; decoder copy + CRC, then AEAD in place)\n", gb / t_open,
              t_copy / t_open);

  // Merge math on `learners` deltas of n values.
  std::vector<std::vector<float>> d(learners, std::vector<float>(n));
  for (auto& v : d)
    for (auto& e : v) e = nd(rng);
  std::vector<std::span<const float>> ds(d.begin(), d.end());
  const std::vector<double> w(learners, 1.0 / learners);
  std::vector<float> merged;
  const double t_mean = best_seconds(3, [&] { merged = ys::merge_deltas(ds, w, ys::MergeRule::mean).delta; });
  const double t_rda = best_seconds(3, [&] { merged = ys::rda_merge(ds, w); });
  std::vector<float> mom(n), params(n);
  for (auto& e : mom) e = nd(rng);
  ys::HelocoParams hp;
  std::vector<float> stale = d[0];
  const double t_helo = best_seconds(3, [&] {
    stale = d[0];
    ys::heloco_correct(stale, mom, hp);
  });
  const double t_outer = best_seconds(3, [&] { ys::outer_step(params, mom, merged, 0.7, 0.9); });
  std::printf("merge math, %d learners x %zu values\n", learners, n);
  std::printf("  mean merge        %7.2f GB/s of deltas read  (%.1f ms; memcpy of the same bytes %.1f ms)\n",
              learners * gb / t_mean, t_mean * 1e3, learners * t_copy * 1e3);
  std::printf("  RDA merge         %7.2f GB/s of deltas read  (%.1f ms; memcpy of the same bytes %.1f ms)\n",
              learners * gb / t_rda, t_rda * 1e3, learners * t_copy * 1e3);
  std::printf("  HeLoCo correct    %7.2f GB/s  (%.1f ms per stale delta, incl. a copy)\n", gb / t_helo, t_helo * 1e3);
  std::printf("  Nesterov step     %7.2f GB/s of params  (%.1f ms)\n", gb / t_outer, t_outer * 1e3);
  return 0;
}
