// Frames, the decoder's defences, authentication and every message codec.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "sync/protocol.hpp"
#include "sync/quant.hpp"

namespace ys = yeto::sync;

namespace {
constexpr std::uint64_t kRun = 0x1122334455667788ull;
constexpr std::size_t kCap = 1 << 20;

std::vector<ys::Frame> decode_all(const std::string& bytes, std::size_t chunk) {
  ys::FrameDecoder d(kRun, kCap);
  std::vector<ys::Frame> out;
  for (std::size_t i = 0; i < bytes.size(); i += chunk) {
    d.feed(bytes.data() + i, std::min(chunk, bytes.size() - i));
    while (auto f = d.next()) out.push_back(std::move(*f));
  }
  return out;
}
}  // namespace

TEST(SyncFrame, RoundTripWholeAndByteByByte) {
  const std::string a = ys::encode_frame(ys::MsgType::heartbeat, kRun, ys::Heartbeat{5, 7}.encode());
  const std::string b = ys::encode_frame(ys::MsgType::leave, kRun, "");
  for (std::size_t chunk : {1ul, 3ul, 1000ul}) {
    const auto frames = decode_all(a + b, chunk);
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(frames[0].type, ys::MsgType::heartbeat);
    const auto hb = ys::Heartbeat::decode(frames[0].payload);
    EXPECT_EQ(hb.step, 5u);
    EXPECT_EQ(hb.samples, 7u);
    EXPECT_EQ(frames[1].type, ys::MsgType::leave);
    EXPECT_TRUE(frames[1].payload.empty());
  }
}

TEST(SyncFrame, TruncatedFrameWaitsForMore) {
  const std::string a = ys::encode_frame(ys::MsgType::heartbeat, kRun, ys::Heartbeat{1, 2}.encode());
  ys::FrameDecoder d(kRun, kCap);
  d.feed(a.data(), a.size() - 1);
  EXPECT_FALSE(d.next().has_value());
  EXPECT_EQ(d.wanted(), 1u);
  d.feed(a.data() + a.size() - 1, 1);
  EXPECT_TRUE(d.next().has_value());
}

TEST(SyncFrame, GarbageIsRejectedAtTheHeader) {
  ys::FrameDecoder d(kRun, kCap);
  const std::string g = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  d.feed(g.data(), g.size());
  EXPECT_THROW(d.next(), ys::ProtocolError);
}

TEST(SyncFrame, OversizedLengthRejectedBeforeThePayloadArrives) {
  std::string a = ys::encode_frame(ys::MsgType::push, kRun, "x");
  const std::uint32_t huge = 0xFFFFFFF0u;
  std::memcpy(a.data() + 16, &huge, 4);
  ys::FrameDecoder d(kRun, kCap);
  d.feed(a.data(), ys::kHeaderBytes);  // only the header
  try {
    d.next();
    FAIL() << "oversized length accepted";
  } catch (const ys::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the cap"), std::string::npos) << e.what();
  }
  // Control messages have their own small cap.
  std::string hb = ys::encode_frame(ys::MsgType::heartbeat, kRun, std::string(ys::kControlCap + 1, 'a'));
  ys::FrameDecoder d2(kRun, kCap);
  d2.feed(hb.data(), hb.size());
  EXPECT_THROW(d2.next(), ys::ProtocolError);
}

TEST(SyncFrame, ForeignRunVersionTypeAndChecksumRejected) {
  const std::string ok = ys::encode_frame(ys::MsgType::heartbeat, kRun, ys::Heartbeat{}.encode());
  auto reject = [](const std::string& bytes, const std::string& what) {
    ys::FrameDecoder d(kRun, kCap);
    d.feed(bytes.data(), bytes.size());
    try {
      d.next();
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ys::ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  reject(ys::encode_frame(ys::MsgType::heartbeat, kRun + 1, ""), "another run");
  std::string v = ok;
  v[4] = 9;
  reject(v, "version");
  std::string t = ok;
  t[6] = 99;
  reject(t, "unknown message type");
  std::string c = ok;
  c[ys::kHeaderBytes + 3] ^= 1;
  reject(c, "checksum");
}

TEST(SyncAuth, SessionSealOpenTamperReplay) {
  const auto key = ys::run_key_from_secret("0123456789abcdef-secret");
  const auto sn = ys::random_nonce(), cn = ys::random_nonce();
  const auto sk = ys::session_key(key, sn, cn);
  ys::Session syncer(sk, 'S', 'L'), learner(sk, 'L', 'S');
  const std::string f1 = learner.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{3, 4}.encode());
  const std::string f2 = learner.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{5, 6}.encode());
  auto frames = decode_all(f1 + f2, 7);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(ys::Heartbeat::decode(syncer.open(frames[0])).step, 3u);
  // Replaying frame 1 in place of frame 2 fails: the sequence number moved on.
  EXPECT_THROW(syncer.open(frames[0]), ys::ProtocolError);
  EXPECT_EQ(ys::Heartbeat::decode(syncer.open(frames[1])).step, 5u);
  // A frame sealed under another key fails.
  ys::Session other(ys::session_key(ys::run_key_from_secret("another-secret-of-16+"), sn, cn), 'L', 'S');
  auto forged = decode_all(other.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{}.encode()), 100);
  ys::Session fresh(sk, 'S', 'L');
  EXPECT_THROW(fresh.open(forged[0]), ys::ProtocolError);
  // A frame reflected back to its sender fails (the direction byte differs).
  ys::Session fresh2(sk, 'L', 'S');
  ys::Session learner2(sk, 'L', 'S');
  auto own = decode_all(learner2.seal(ys::MsgType::heartbeat, kRun, ""), 100);
  EXPECT_THROW(fresh2.open(own[0]), ys::ProtocolError);
}

TEST(SyncAuth, HelloTagDependsOnEverySignedField) {
  const auto key = ys::run_key_from_secret("0123456789abcdef-secret");
  const auto sn = ys::random_nonce(), cn = ys::random_nonce();
  const auto text = ys::Hello::signed_text(kRun, sn, cn, "alice", 42);
  const auto tag = ys::mac(key, text);
  EXPECT_TRUE(ys::mac_ok(key, text, tag.data()));
  EXPECT_FALSE(ys::mac_ok(key, ys::Hello::signed_text(kRun, sn, cn, "bob", 42), tag.data()));
  EXPECT_FALSE(ys::mac_ok(key, ys::Hello::signed_text(kRun, sn, cn, "alice", 43), tag.data()));
  EXPECT_FALSE(ys::mac_ok(key, ys::Hello::signed_text(kRun + 1, sn, cn, "alice", 42), tag.data()));
  EXPECT_FALSE(ys::mac_ok(ys::run_key_from_secret("wrong-secret-000000"), text, tag.data()));
  EXPECT_THROW(ys::run_key_from_secret("short"), yeto::UsageError);
  EXPECT_EQ(ys::run_key_from_secret("  0123456789abcdef-secret\n"), key);
  EXPECT_NE(ys::run_id_from_name("a"), ys::run_id_from_name("b"));
}

TEST(SyncMessages, RoundTrips) {
  ys::Hello h;
  h.learner_id = "island-3";
  h.client_nonce = ys::random_nonce();
  h.layout_fp = 99;
  h.tag[0] = 7;
  const auto h2 = ys::Hello::decode(h.encode());
  EXPECT_EQ(h2.learner_id, "island-3");
  EXPECT_EQ(h2.client_nonce, h.client_nonce);
  EXPECT_EQ(h2.tag, h.tag);

  ys::Welcome w;
  w.versions = {1, 2, 3};
  EXPECT_EQ(ys::Welcome::decode(w.encode()).versions, w.versions);

  ys::Init in;
  in.pattern = ys::FragmentPattern::strided;
  in.fragments = 2;
  in.tensors = {{"a", 2}, {"b", 1}};
  in.params = {1, 2, 3};
  const auto in2 = ys::Init::decode(in.encode());
  EXPECT_EQ(in2.pattern, ys::FragmentPattern::strided);
  EXPECT_EQ(in2.tensors[1].name, "b");
  EXPECT_EQ(in2.params, in.params);

  ys::FragmentMsg f{1, 9, {0.5f, -0.25f}};
  const auto f2 = ys::FragmentMsg::decode(f.encode());
  EXPECT_EQ(f2.version, 9u);
  EXPECT_EQ(f2.data, f.data);

  ys::FinalCut fc;
  fc.versions = {4, 5};
  fc.fragments = {{1, 2}, {3}};
  fc.digest = ys::state_digest(fc.versions, fc.fragments);
  const auto fc2 = ys::FinalCut::decode(fc.encode());
  EXPECT_EQ(fc2.fragments, fc.fragments);
  EXPECT_EQ(fc2.digest, fc.digest);
  EXPECT_NE(ys::state_digest({4, 6}, fc.fragments), fc.digest);

  ys::PushAck a{3, ys::PushStatus::too_stale, 8};
  const auto a2 = ys::PushAck::decode(a.encode());
  EXPECT_EQ(a2.status, ys::PushStatus::too_stale);
  EXPECT_EQ(ys::ErrorMsg::decode(ys::ErrorMsg{5, "bad"}.encode()).message, "bad");
}

TEST(SyncMessages, PushQ4AndF32Deltas) {
  std::vector<float> d(130);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = std::cos(static_cast<float>(i)) * 0.01f;
  const auto p = ys::Push::decode(ys::Push::from_delta_q4(2, 7, 64, 10, d, 32).encode());
  EXPECT_EQ(p.fragment, 2u);
  EXPECT_EQ(p.base_version, 7u);
  EXPECT_EQ(p.samples, 64u);
  EXPECT_EQ(p.inner_steps, 10u);
  const auto back = p.delta();
  ASSERT_EQ(back.size(), d.size());
  EXPECT_EQ(back, ys::q4_decode(ys::q4_encode(d, 32)));
  const auto e = ys::Push::decode(ys::Push::from_delta_f32(0, 0, 1, 1, d).encode());
  EXPECT_EQ(e.delta(), d);
  // A body that lies about its size is refused.
  auto bad = ys::Push::from_delta_q4(2, 7, 64, 10, d, 32);
  bad.numel = 131;
  EXPECT_THROW(ys::Push::decode(bad.encode()).delta(), ys::WireError);
}

TEST(SyncMessages, TruncationsAndLiesNeverCrash) {
  ys::Init in;
  in.tensors = {{"a", 2}};
  in.params = {1, 2};
  const std::string full = in.encode();
  for (std::size_t n = 0; n < full.size(); ++n) EXPECT_THROW(ys::Init::decode(full.substr(0, n)), ys::WireError) << n;
  EXPECT_THROW(ys::Init::decode(full + "x"), ys::WireError);
  // A float count far beyond the payload is refused before allocating.
  ys::ByteWriter w;
  w.u32(0);
  w.u64(1);
  w.u64(1ull << 60);
  EXPECT_THROW(ys::FragmentMsg::decode(w.take()), ys::WireError);
}

// Deterministic mutation loop over valid frames: the decoder and every message codec either
// decode, wait for more bytes or throw one of the two protocol exception types. (The
// libFuzzer target sync_frame_fuzz explores the same entry point when clang is present.)
TEST(SyncFrame, MutatedFramesNeverCrash) {
  std::mt19937 rng(12345);
  std::vector<std::string> seeds = {
      ys::encode_frame(ys::MsgType::heartbeat, kRun, ys::Heartbeat{1, 2}.encode()),
      ys::encode_frame(ys::MsgType::push, kRun, ys::Push::from_delta_q4(0, 1, 2, 3, std::vector<float>(77, 0.5f), 16).encode()),
      ys::encode_frame(ys::MsgType::fragment, kRun, ys::FragmentMsg{0, 1, {1, 2, 3}}.encode()),
      ys::encode_frame(ys::MsgType::init, kRun, ys::Init{ys::FragmentPattern::binpack, 1, {{"w", 2}}, {1, 2}}.encode()),
  };
  int decoded = 0, rejected = 0;
  for (int it = 0; it < 20000; ++it) {
    std::string s = seeds[rng() % seeds.size()];
    const int muts = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < muts; ++m) {
      const std::size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0: s[pos] = static_cast<char>(rng()); break;
        case 1: s.erase(pos, 1 + rng() % 8); break;
        case 2: s.insert(pos, std::string(1 + rng() % 8, static_cast<char>(rng()))); break;
        default: s = s.substr(0, pos); break;
      }
      if (s.empty()) s = "x";
    }
    // Fix the CRC half of the time so mutations reach the message codecs.
    if (it % 2 == 0 && s.size() >= ys::kHeaderBytes) {
      const std::uint32_t crc = ys::frame_crc(std::string_view(s).substr(0, 20), std::string_view(s).substr(ys::kHeaderBytes));
      std::memcpy(s.data() + 20, &crc, 4);
    }
    try {
      for (const auto& f : decode_all(s, 1 + rng() % 64)) {
        ++decoded;
        try {
          switch (f.type) {
            case ys::MsgType::push: ys::Push::decode(f.payload).delta(); break;
            case ys::MsgType::fragment: ys::FragmentMsg::decode(f.payload); break;
            case ys::MsgType::init: ys::Init::decode(f.payload); break;
            case ys::MsgType::heartbeat: ys::Heartbeat::decode(f.payload); break;
            default: break;
          }
        } catch (const ys::WireError&) {
          ++rejected;
        }
      }
    } catch (const ys::ProtocolError&) {
      ++rejected;
    }
  }
  EXPECT_GT(decoded, 100);
  EXPECT_GT(rejected, 1000);
}
