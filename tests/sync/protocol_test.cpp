// Frames, the decoder's defences, authentication and every message codec.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
  // init_request (17, protocol 5) and merged (18, protocol 6) are known control messages; 19 is
  // not a type.
  const std::string ask = ys::encode_frame(ys::MsgType::init_request, kRun, "");
  ys::FrameDecoder da(kRun, kCap);
  da.feed(ask.data(), ask.size());
  const auto fa = da.next();
  ASSERT_TRUE(fa.has_value());
  EXPECT_EQ(fa->type, ys::MsgType::init_request);
  EXPECT_STREQ(ys::msg_name(fa->type), "init_request");
  EXPECT_FALSE(ys::is_bulk(ys::MsgType::init_request));
  const std::string merged = ys::encode_frame(ys::MsgType::merged, kRun, ys::MergedMsg{1, 8, 5}.encode());
  ys::FrameDecoder dm(kRun, kCap);
  dm.feed(merged.data(), merged.size());
  const auto fm = dm.next();
  ASSERT_TRUE(fm.has_value());
  EXPECT_STREQ(ys::msg_name(fm->type), "merged");
  EXPECT_FALSE(ys::is_bulk(ys::MsgType::merged));
  const auto m = ys::MergedMsg::decode(fm->payload);
  EXPECT_EQ(m.fragment, 1u);
  EXPECT_EQ(m.version, 8u);
  EXPECT_EQ(m.push_base, 5u);
  EXPECT_THROW(ys::MergedMsg::decode(ys::MergedMsg{1, 5, 5}.encode()), ys::WireError);  // no merge after its base
  EXPECT_THROW(ys::MergedMsg::decode(ys::MergedMsg{1, 8, 5}.encode() + "x"), ys::WireError);
  EXPECT_THROW(ys::MergedMsg::decode(ys::MergedMsg{1, 8, 5}.encode().substr(0, 19)), ys::WireError);
  std::string t19 = ask;
  t19[6] = 19;
  reject(t19, "unknown message type");
  std::string c = ok;
  c[ys::kHeaderBytes + 3] ^= 1;
  reject(c, "checksum");
}

namespace {
const ys::Key kKey = ys::run_key_from_secret("0123456789abcdef-secret");

ys::Frame one_frame(const std::string& bytes) {
  auto frames = decode_all(bytes, 4096);
  EXPECT_EQ(frames.size(), 1u);
  return frames.at(0);
}
// A sealed frame with its CRC recomputed, so that a tampered byte reaches the AEAD.
std::string with_crc(std::string s) {
  const std::uint32_t crc = ys::frame_crc(std::string_view(s).substr(0, 20), std::string_view(s).substr(ys::kHeaderBytes));
  std::memcpy(s.data() + 20, &crc, 4);
  return s;
}
bool contains(const std::string& hay, const void* p, std::size_t n) {
  return hay.find(std::string(static_cast<const char*>(p), n)) != std::string::npos;
}
}  // namespace

TEST(SyncSeal, RoundTripHidesThePayloadAndCountsTheTagInTheLength) {
  const auto sk = ys::session_key(kKey, ys::random_nonce(), ys::random_nonce());
  ys::Session learner(sk, 'L', 'S'), syncer(sk, 'S', 'L');
  std::vector<float> data(4096);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::sin(0.37f * static_cast<float>(i)) + 2.0f;
  const std::string payload = ys::FragmentMsg{1, 9, data}.encode();
  const std::string bytes = learner.seal(ys::MsgType::fragment, kRun, payload);
  ASSERT_EQ(bytes.size(), ys::kHeaderBytes + payload.size() + ys::kSealBytes);
  std::uint32_t len;
  std::memcpy(&len, bytes.data() + 16, 4);
  EXPECT_EQ(len, payload.size() + ys::kSealBytes);
  std::uint16_t version;
  std::memcpy(&version, bytes.data() + 4, 2);
  EXPECT_EQ(version, 7u);
  // No 64-byte piece of the tensor's bytes is readable in the frame.
  for (std::size_t off = 0; off + 64 <= data.size() * 4; off += 64)
    ASSERT_FALSE(contains(bytes, reinterpret_cast<const char*>(data.data()) + off, 64)) << off;
  for (std::size_t chunk : {1ul, 5ul, 100000ul}) {
    ys::Session rx(sk, 'S', 'L');
    auto frames = decode_all(bytes, chunk);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(ys::FragmentMsg::decode(rx.open(std::move(frames[0]))).data, data);
  }
  // Empty payloads are sealed too (a bare tag).
  const std::string leave = learner.seal(ys::MsgType::leave, kRun, "");
  EXPECT_EQ(leave.size(), ys::kHeaderBytes + ys::kSealBytes);
  EXPECT_EQ(syncer.open(one_frame(bytes)), payload);
  EXPECT_EQ(syncer.open(one_frame(leave)), "");
}

// A decoder with defer_crc_from hands a bulk frame over with its CRC unchecked (the syncer checks
// it on a frame worker, not on its I/O thread); smaller frames are checked at once, and opening
// the frame checks the pending CRC before anything else, so a damaged frame is refused either way.
TEST(SyncFrame, DeferredChecksumIsCheckedWhenTheFrameIsOpened) {
  const auto sk = ys::session_key(kKey, ys::random_nonce(), ys::random_nonce());
  ys::Session learner(sk, 'L', 'S');
  const std::string payload = ys::FragmentMsg{0, 1, std::vector<float>(1000, 0.5f)}.encode();
  const std::string good = learner.seal(ys::MsgType::fragment, kRun, payload);
  std::string bad = good;
  bad[ys::kHeaderBytes + 100] ^= 1;  // the CRC no longer matches
  const std::string small = learner.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{1, 2}.encode());
  std::string bad_small = small;
  bad_small[ys::kHeaderBytes + 1] ^= 1;
  auto decoded = [](const std::string& bytes) {
    ys::FrameDecoder d(kRun, kCap);
    d.defer_crc_from(1024);
    d.feed(bytes.data(), bytes.size());
    return d.next();
  };
  auto f = decoded(bad);
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(f->crc_pending);
  ys::Frame copy = *f;
  EXPECT_THROW(ys::check_frame_crc(copy), ys::ProtocolError);
  try {
    ys::Session rx(sk, 'S', 'L');
    rx.open(std::move(*f));
    ADD_FAILURE() << "a frame with a wrong CRC was opened";
  } catch (const ys::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  auto g = decoded(good);
  ASSERT_TRUE(g.has_value());
  EXPECT_TRUE(g->crc_pending);
  ys::Session rx(sk, 'S', 'L');
  EXPECT_EQ(rx.open(std::move(*g)), payload);
  auto h = decoded(small);
  ASSERT_TRUE(h.has_value());
  EXPECT_FALSE(h->crc_pending);  // under the threshold: checked on decoding
  EXPECT_THROW(decoded(bad_small), ys::ProtocolError);
}

TEST(SyncSeal, TamperedCiphertextTagOrHeaderIsRefused) {
  const auto sk = ys::session_key(kKey, ys::random_nonce(), ys::random_nonce());
  ys::Session learner(sk, 'L', 'S');
  const std::string good = learner.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{3, 4}.encode());
  auto refused = [&](const std::string& bytes) {
    ys::Session rx(sk, 'S', 'L');
    try {
      rx.open(one_frame(bytes));
    } catch (const ys::ProtocolError& e) {
      return std::string(e.what()).find("failed authentication") != std::string::npos;
    }
    return false;
  };
  EXPECT_FALSE(refused(good));
  for (std::size_t i = ys::kHeaderBytes; i < good.size(); ++i) {  // every ciphertext and tag byte
    std::string t = good;
    t[i] ^= 0x20;
    EXPECT_TRUE(refused(with_crc(t))) << "byte " << i;
  }
  // The header is the additional data: another type of the same size is refused.
  std::string t = good;
  const std::uint16_t done = static_cast<std::uint16_t>(ys::MsgType::done);
  std::memcpy(t.data() + 6, &done, 2);
  EXPECT_TRUE(refused(with_crc(t)));
  // A frame directly modified (no decoder) in its header bytes is refused as well.
  ys::Frame f = one_frame(good);
  f.header[8] ^= 1;  // the run id
  ys::Session rx(sk, 'S', 'L');
  EXPECT_THROW(rx.open(f), ys::ProtocolError);
  // A truncated payload (shorter than a tag) is refused.
  ys::Frame g = one_frame(good);
  g.payload.resize(ys::kSealBytes - 1);
  EXPECT_THROW(rx.open(g), ys::ProtocolError);
}

TEST(SyncSeal, ReplayReorderReflectionAndAnotherKeyAreRefused) {
  const auto sn = ys::random_nonce(), cn = ys::random_nonce();
  const auto sk = ys::session_key(kKey, sn, cn);
  ys::Session learner(sk, 'L', 'S');
  const std::string f1 = learner.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{3, 4}.encode());
  const std::string f2 = learner.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{5, 6}.encode());
  auto frames = decode_all(f1 + f2, 7);
  ASSERT_EQ(frames.size(), 2u);
  {  // reordered: the second frame first is refused
    ys::Session syncer(sk, 'S', 'L');
    EXPECT_THROW(syncer.open(frames[1]), ys::ProtocolError);
  }
  ys::Session syncer(sk, 'S', 'L');
  EXPECT_EQ(ys::Heartbeat::decode(syncer.open(frames[0])).step, 3u);
  // Replaying frame 1 in place of frame 2 fails: the sequence number moved on.
  EXPECT_THROW(syncer.open(frames[0]), ys::ProtocolError);
  EXPECT_EQ(ys::Heartbeat::decode(syncer.open(frames[1])).step, 5u);
  // A frame sealed under another run secret (same nonces) fails.
  ys::Session other(ys::session_key(ys::run_key_from_secret("another-secret-of-16+"), sn, cn), 'L', 'S');
  ys::Session fresh(sk, 'S', 'L');
  EXPECT_THROW(fresh.open(one_frame(other.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{}.encode()))),
               ys::ProtocolError);
  // ... and so does one of another connection (other nonces, same secret).
  ys::Session other_conn(ys::session_key(kKey, ys::random_nonce(), cn), 'L', 'S');
  EXPECT_THROW(fresh.open(one_frame(other_conn.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{}.encode()))),
               ys::ProtocolError);
  // A frame reflected back to its sender fails (the direction is part of the nonce).
  ys::Session learner_rx(sk, 'L', 'S'), learner2(sk, 'L', 'S');
  EXPECT_THROW(learner_rx.open(one_frame(learner2.seal(ys::MsgType::heartbeat, kRun, ""))), ys::ProtocolError);
  // The same frame in the right direction opens.
  ys::Session learner3(sk, 'L', 'S');
  EXPECT_EQ(fresh.open(one_frame(learner3.seal(ys::MsgType::heartbeat, kRun, ""))), "");
}

TEST(SyncSeal, VersionOneFramesAreRefused) {
  const auto sk = ys::session_key(kKey, ys::random_nonce(), ys::random_nonce());
  ys::Session learner(sk, 'L', 'S');
  std::string v1 = learner.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{}.encode());
  const std::uint16_t one = 1;
  std::memcpy(v1.data() + 4, &one, 2);
  ys::FrameDecoder d(kRun, kCap);
  d.feed(v1.data(), v1.size());
  try {
    d.next();
    FAIL() << "a version 1 frame was accepted";
  } catch (const ys::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("protocol version 1 is not supported (this build speaks 7)"), std::string::npos)
        << e.what();
  }
}

TEST(SyncAuth, HelloBoxHidesTheLearnerAndOpensOnlyWithTheSecretAndNonces) {
  const auto sn = ys::random_nonce();
  ys::Hello h;
  h.learner_id = "island-secret-name";
  h.client_nonce = ys::random_nonce();
  h.layout_fp = 0x0123456789abcdefull;
  const std::string bytes = h.seal(kKey, kRun, sn);
  EXPECT_EQ(bytes.size(), ys::kHeaderBytes + ys::kHelloPayload);
  EXPECT_EQ(bytes.find(h.learner_id), std::string::npos);
  EXPECT_FALSE(contains(bytes, &h.layout_fp, 8));
  const ys::Frame f = one_frame(bytes);
  EXPECT_EQ(f.type, ys::MsgType::hello);
  EXPECT_EQ(ys::Hello::client_nonce_of(f), h.client_nonce);  // in clear
  const auto o = ys::Hello::open(kKey, sn, f);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->learner_id, h.learner_id);
  EXPECT_EQ(o->layout_fp, h.layout_fp);
  EXPECT_EQ(o->client_nonce, h.client_nonce);
  // Another secret, or another connection's challenge (a replayed hello), does not open it.
  EXPECT_FALSE(ys::Hello::open(ys::run_key_from_secret("wrong-secret-000000"), sn, f).has_value());
  EXPECT_FALSE(ys::Hello::open(kKey, ys::random_nonce(), f).has_value());
  // Nor does any change of the client nonce, the box, or the header.
  for (std::size_t i = 0; i < f.payload.size(); i += 7) {
    ys::Frame t = f;
    t.payload[i] ^= 4;
    EXPECT_FALSE(ys::Hello::open(kKey, sn, t).has_value()) << i;
  }
  ys::Frame t = f;
  t.header[8] ^= 1;
  EXPECT_FALSE(ys::Hello::open(kKey, sn, t).has_value());
  // The frame's size does not depend on the id's length; an id over the limit is refused.
  ys::Hello shorter = h;
  shorter.learner_id = "a";
  EXPECT_EQ(shorter.seal(kKey, kRun, sn).size(), bytes.size());
  shorter.learner_id = std::string(ys::kMaxLearnerId, 'x');
  EXPECT_EQ(ys::Hello::open(kKey, sn, one_frame(shorter.seal(kKey, kRun, sn)))->learner_id, shorter.learner_id);
  shorter.learner_id += "x";
  EXPECT_THROW(shorter.seal(kKey, kRun, sn), ys::WireError);
  // A hello of the wrong size is malformed before any key is tried.
  ys::Frame small = f;
  small.payload.pop_back();
  EXPECT_THROW(ys::Hello::open(kKey, sn, small), ys::WireError);
}

TEST(SyncAuth, WelcomeTagAndKeys) {
  const auto sn = ys::random_nonce(), cn = ys::random_nonce();
  const auto text = ys::Welcome::signed_text(kRun, sn, cn);
  const auto tag = ys::mac(kKey, text);
  EXPECT_TRUE(ys::mac_ok(kKey, text, tag.data()));
  EXPECT_FALSE(ys::mac_ok(kKey, ys::Welcome::signed_text(kRun, sn, ys::random_nonce()), tag.data()));
  EXPECT_FALSE(ys::mac_ok(kKey, ys::Welcome::signed_text(kRun + 1, sn, cn), tag.data()));
  EXPECT_FALSE(ys::mac_ok(ys::run_key_from_secret("wrong-secret-000000"), text, tag.data()));
  EXPECT_NE(ys::session_key(kKey, sn, cn), ys::hello_key(kKey, sn, cn));
  EXPECT_NE(ys::session_key(kKey, sn, cn), ys::session_key(kKey, cn, sn));
  EXPECT_THROW(ys::run_key_from_secret("short"), yeto::UsageError);
  EXPECT_EQ(ys::run_key_from_secret("  0123456789abcdef-secret\n"), kKey);
  EXPECT_NE(ys::run_id_from_name("a"), ys::run_id_from_name("b"));
}

TEST(SyncMessages, RoundTrips) {
  ys::Welcome w;
  w.versions = {1, 2, 3};
  EXPECT_EQ(ys::Welcome::decode(w.encode()).versions, w.versions);
  EXPECT_EQ(ys::Welcome::decode(w.encode()).init, ys::InitAsk::none);
  for (const auto ask : {ys::InitAsk::send, ys::InitAsk::pending}) {
    ys::Welcome a;
    a.init = ask;
    EXPECT_EQ(ys::Welcome::decode(a.encode()).init, ask) << ys::init_ask_name(ask);
    EXPECT_TRUE(ys::Welcome::decode(a.encode()).versions.empty());
  }
  {  // the init byte follows the 32-byte tag; values past `pending` are refused
    std::string bad = w.encode();
    bad[ys::kTagBytes] = 3;
    EXPECT_THROW(ys::Welcome::decode(bad), ys::WireError);
    bad[ys::kTagBytes] = static_cast<char>(0xFF);
    EXPECT_THROW(ys::Welcome::decode(bad), ys::WireError);
  }

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

  // Omitted fragments travel as numel 0 and decode empty; the digest is the full cut's.
  const std::string omitted = fc.encode({true, false});
  EXPECT_EQ(omitted.size(), fc.encoded_size({true, false}));
  EXPECT_EQ(fc.encode().size(), fc.encoded_size({}));
  EXPECT_EQ(omitted.size() + 2 * 4, fc.encode().size());
  const auto fc3 = ys::FinalCut::decode(omitted);
  EXPECT_TRUE(fc3.fragments[0].empty());
  EXPECT_EQ(fc3.fragments[1], fc.fragments[1]);
  EXPECT_EQ(fc3.versions, fc.versions);
  EXPECT_EQ(fc3.digest, fc.digest);

  // A fragment's digest is the cut's digest of that fragment alone.
  const std::vector<float> values = {0.5f, -1.0f, 3.0f};
  EXPECT_EQ(ys::fragment_digest(7, values), ys::state_digest({7}, {values}));
  EXPECT_NE(ys::fragment_digest(8, values), ys::fragment_digest(7, values));
  ys::Holds h;
  h.claims.push_back({7, ys::fragment_digest(7, values)});
  h.claims.push_back({ys::kNoClaim, {}});
  const auto h2 = ys::Holds::decode(h.encode());
  ASSERT_EQ(h2.claims.size(), 2u);
  EXPECT_EQ(h2.claims[0].version, 7u);
  EXPECT_EQ(h2.claims[0].digest, h.claims[0].digest);
  EXPECT_EQ(h2.claims[1].version, ys::kNoClaim);
  const std::string hb = h.encode();
  for (std::size_t n = 0; n < hb.size(); ++n) EXPECT_THROW(ys::Holds::decode(hb.substr(0, n)), ys::WireError) << n;
  EXPECT_THROW(ys::Holds::decode(hb + "x"), ys::WireError);
  EXPECT_EQ(ys::Holding::decode(ys::Holding{{0, 2, 5}}.encode()).fragments, (std::vector<std::uint32_t>{0, 2, 5}));
  EXPECT_THROW(ys::Holding::decode(ys::Holding{{2, 2}}.encode()), ys::WireError);  // not ascending
  EXPECT_THROW(ys::Holding::decode(ys::Holding{{3, 1}}.encode()), ys::WireError);
  ys::ByteWriter lie;
  lie.u32(1000000);  // a count far beyond the payload
  EXPECT_THROW(ys::Holding::decode(lie.take()), ys::WireError);

  ys::PushAck a{3, ys::PushStatus::too_stale, 8};
  const auto a2 = ys::PushAck::decode(a.encode());
  EXPECT_EQ(a2.status, ys::PushStatus::too_stale);
  EXPECT_EQ(ys::ErrorMsg::decode(ys::ErrorMsg{5, "bad"}.encode()).message, "bad");
}

// init leaves out blocks of zeros (a LoRA's B), exactly: -0.0, denormals and a partial last
// block survive bit for bit; a dense state goes raw; lies about the blocks are refused.
TEST(SyncMessages, InitLeavesOutZeroBlocksExactly) {
  ys::Init in;
  in.tensors = {{"a.lora_A", 700}, {"a.lora_B", 1300}};
  in.params.assign(2000, 0.0f);
  for (std::size_t i = 0; i < 700; ++i) in.params[i] = std::sin(static_cast<float>(i)) * 0.1f;
  in.params[1000] = -0.0f;                    // a block that is not all +0.0
  in.params[1999] = 1e-42f;                   // a denormal in the partial last block
  const std::string enc = in.encode();
  ys::Init raw = in;
  const auto out = ys::Init::decode(enc);
  ASSERT_EQ(out.params.size(), in.params.size());
  EXPECT_EQ(std::memcmp(out.params.data(), in.params.data(), in.params.size() * 4), 0);
  // Blocks 0-2 (values 0..767), block 3 (the -0.0) and block 7 (partial) are stored: 5 of 8.
  EXPECT_GT(enc.size(), (3u * 256u + 256u + 208u) * 4u);
  EXPECT_LT(enc.size(), (3u * 256u + 256u + 208u) * 4u + 80u);  // + header, names, block, bitmap
  // A state without zero blocks travels raw, and a raw message decodes the same way.
  for (auto& v : raw.params) v = 0.5f;
  const std::string dense = raw.encode();
  EXPECT_EQ(ys::Init::decode(dense).params, raw.params);
  for (std::size_t n = 0; n < enc.size(); ++n) EXPECT_THROW(ys::Init::decode(enc.substr(0, n)), ys::WireError) << n;
  // The encoding byte follows the count: pattern, fragments, tensor count, two tensors, count.
  const std::size_t enc_at = 1 + 4 + 4 + 2 * (4 + 8 + 8) + 8;
  std::string bad = enc;
  ASSERT_EQ(static_cast<std::uint8_t>(bad[enc_at]), 1u);
  bad[enc_at] = 7;
  EXPECT_THROW(ys::Init::decode(bad), ys::WireError);  // unknown encoding
  bad = enc;
  bad[enc_at + 1] = 0;  // block size 256 -> 0
  bad[enc_at + 2] = 0;
  EXPECT_THROW(ys::Init::decode(bad), ys::WireError);
  bad = enc;
  bad[enc_at + 5] = static_cast<char>(0xff);  // every block claimed stored: more values than the message holds
  EXPECT_THROW(ys::Init::decode(bad), ys::WireError);
  // An all-zero bitmap claiming a huge state from a small message is refused before allocating.
  ys::ByteWriter w;
  w.u8(0);
  w.u32(1);
  w.u32(1);
  w.str("huge");
  w.u64(1ull << 36);
  w.u64(1ull << 36);
  w.u8(1);
  w.u32(ys::kInitBlock);
  w.bytes(std::string(1024, '\0').data(), 1024);
  EXPECT_THROW(ys::Init::decode(w.take()), ys::WireError);
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

// A q4 downlink update: what a learner decodes and applies reproduces the syncer's public state
// bit for bit; a malformed update is refused with a WireError that says what is wrong, and
// leaves the learner's state untouched.
TEST(SyncMessages, UpdateRoundTripAndMalformedUpdatesAreRefused) {
  std::vector<float> theta(130), pub(130), learner;
  for (std::size_t i = 0; i < theta.size(); ++i) {
    pub[i] = std::sin(static_cast<float>(i));
    theta[i] = pub[i] + 0.01f * std::cos(static_cast<float>(3 * i));
  }
  learner = pub;
  const ys::Published pb = ys::publish_update(3, 11, 12, theta, pub, 32);
  ASSERT_TRUE(pb.update.has_value());
  const std::string wire = pb.update->encode();
  const ys::UpdateMsg u = ys::UpdateMsg::decode(wire);
  EXPECT_EQ(u.fragment, 3u);
  EXPECT_EQ(u.base_version, 11u);
  EXPECT_EQ(u.version, 12u);
  EXPECT_EQ(u.numel, 130u);
  EXPECT_EQ(u.body.size(), ys::q4_encoded_bytes(130, 32));
  u.apply_to(learner);
  EXPECT_EQ(0, std::memcmp(learner.data(), pub.data(), pub.size() * 4));
  EXPECT_EQ(ys::public_crc(learner), u.crc);

  auto refused = [](const std::string& bytes, const std::string& why) {
    try {
      ys::UpdateMsg::decode(bytes);
      ADD_FAILURE() << "accepted an update that should fail with: " << why;
    } catch (const ys::WireError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  for (std::size_t n = 0; n < wire.size(); ++n) EXPECT_THROW(ys::UpdateMsg::decode(wire.substr(0, n)), ys::WireError) << n;
  refused(wire + "x", "trailing bytes");
  ys::UpdateMsg m = u;
  m.version = 14;
  refused(m.encode(), "does not follow its base version");
  m = u;
  m.block = 1;
  refused(m.encode(), "block size out of range");
  m = u;
  m.numel = 131;
  refused(m.encode(), "wrong size for 131 values");
  m = u;
  m.body.pop_back();
  refused(m.encode(), "wrong size");
  // Bodies that decode but cannot be applied: a NaN or negative scale, a zero nibble, a fragment
  // of another size. The learner's state is untouched.
  const std::vector<float> before = learner;
  m = u;
  const float nan = std::nanf("");
  std::memcpy(m.body.data(), &nan, 4);
  EXPECT_THROW(ys::UpdateMsg::decode(m.encode()).apply_to(learner), ys::WireError);
  m = u;
  const float neg = -1.0f;
  std::memcpy(m.body.data() + 4, &neg, 4);
  EXPECT_THROW(ys::UpdateMsg::decode(m.encode()).apply_to(learner), ys::WireError);
  m = u;
  m.body[ys::q4_blocks(130, 32) * 4] = 0;
  EXPECT_THROW(ys::UpdateMsg::decode(m.encode()).apply_to(learner), ys::WireError);
  std::vector<float> other(129);
  EXPECT_THROW(u.apply_to(other), ys::WireError);
  EXPECT_EQ(0, std::memcmp(learner.data(), before.data(), before.size() * 4));
  // A count far beyond the payload is refused before allocating.
  ys::ByteWriter w;
  w.u32(0);
  w.u64(1);
  w.u64(2);
  w.u64(1ull << 62);
  w.u32(64);
  w.u8(0);
  w.u32(0);
  w.u64(1ull << 60);
  EXPECT_THROW(ys::UpdateMsg::decode(w.take()), ys::WireError);
}

// q2 both ways: a push and a downlink update carry their encoding, decode to exactly what the
// codec gives, and a learner applying the update holds the syncer's public state bit for bit.
TEST(SyncMessages, Q2PushesAndUpdates) {
  std::vector<float> d(130);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = std::cos(static_cast<float>(i)) * 0.01f;
  const auto wire = ys::Push::from_delta_quantised(ys::DeltaEncoding::q2, 2, 7, 64, 10, d, 32).encode();
  const auto p = ys::Push::decode(wire);
  EXPECT_EQ(p.encoding, ys::DeltaEncoding::q2);
  EXPECT_EQ(p.body.size(), ys::q2_encoded_bytes(130, 32));
  EXPECT_EQ(p.body.size(), 5u * 4 + 33);  // half of q4's codes
  std::vector<float> scales(5), want(130);
  std::vector<std::uint8_t> codes(33);
  ys::q2_encode_into(d, 32, scales.data(), codes.data());
  ys::q2_decode_into(130, 32, scales.data(), codes.data(), want);
  EXPECT_EQ(p.delta(), want);
  EXPECT_THROW(ys::Push::from_delta_quantised(ys::DeltaEncoding::f32, 0, 0, 1, 1, d, 32), yeto::Error);
  // A q2 body with q4's size, an unknown encoding, and padding bits set are refused.
  auto lie = p;
  lie.encoding = ys::DeltaEncoding::q4;
  EXPECT_THROW(ys::Push::decode(lie.encode()).delta(), ys::WireError);
  std::string unknown = wire;
  unknown[4 + 8 + 8 + 4 + 8] = 3;  // the encoding byte
  EXPECT_THROW(ys::Push::decode(unknown), ys::WireError);
  auto padded = p;
  padded.body.back() = static_cast<char>(padded.body.back() | 0x40);  // 130 = 4 x 32 + 2: bits 4-7 of the last byte are padding
  EXPECT_THROW(ys::Push::decode(padded.encode()).delta(), ys::WireError);

  std::vector<float> theta(130), pub(130), learner;
  for (std::size_t i = 0; i < theta.size(); ++i) {
    pub[i] = std::sin(static_cast<float>(i));
    theta[i] = pub[i] + 0.01f * std::cos(static_cast<float>(3 * i));
  }
  learner = pub;
  const ys::Published pb = ys::publish_update(3, 11, 12, theta, pub, 32, ys::DeltaEncoding::q2);
  ASSERT_TRUE(pb.update.has_value());
  const std::string uw = pb.update->encode();
  const ys::UpdateMsg u = ys::UpdateMsg::decode(uw);
  EXPECT_EQ(u.encoding, ys::DeltaEncoding::q2);
  EXPECT_EQ(u.body.size(), ys::q2_encoded_bytes(130, 32));
  u.apply_to(learner);
  EXPECT_EQ(0, std::memcmp(learner.data(), pub.data(), pub.size() * 4));
  EXPECT_EQ(ys::public_crc(learner), u.crc);
  // The residual θ − P is what the 2-bit code dropped, carried into the next update: publishing
  // again without a merge in between brings P closer to θ.
  double before = 0, after = 0;
  for (std::size_t i = 0; i < theta.size(); ++i) before += std::fabs(theta[i] - pub[i]);
  const ys::Published again = ys::publish_update(3, 12, 13, theta, pub, 32, ys::DeltaEncoding::q2);
  ASSERT_TRUE(again.update.has_value());
  for (std::size_t i = 0; i < theta.size(); ++i) after += std::fabs(theta[i] - pub[i]);
  EXPECT_LT(after, 0.7 * before);
  // An update says q4 or q2: f32 (1) and unknown encodings are refused by name.
  for (const std::uint8_t bad : {std::uint8_t{1}, std::uint8_t{3}, std::uint8_t{255}}) {
    std::string b = uw;
    b[4 + 8 + 8 + 8 + 4] = static_cast<char>(bad);
    try {
      ys::UpdateMsg::decode(b);
      ADD_FAILURE() << "accepted encoding " << int(bad);
    } catch (const ys::WireError& e) {
      EXPECT_NE(std::string(e.what()).find("unknown encoding"), std::string::npos) << e.what();
    }
  }
  ys::UpdateMsg q4_sized = u;
  q4_sized.encoding = ys::DeltaEncoding::q4;
  EXPECT_THROW(ys::UpdateMsg::decode(q4_sized.encode()), ys::WireError);
  EXPECT_THROW(ys::publish_update(3, 13, 14, theta, pub, 32, ys::DeltaEncoding::f32), yeto::Error);
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
      ys::encode_frame(ys::MsgType::holds, kRun, ys::Holds{{{3, {}}, {ys::kNoClaim, {}}}}.encode()),
      ys::encode_frame(ys::MsgType::holding, kRun, ys::Holding{{0, 1, 4}}.encode()),
  };
  {
    std::vector<float> theta(45, 0.25f), pub(45, 0.0f);
    seeds.push_back(ys::encode_frame(ys::MsgType::update, kRun,
                                     ys::publish_update(0, 1, 2, theta, pub, 16).update->encode()));
  }
  const auto sn = ys::random_nonce();
  const auto sk = ys::session_key(kKey, sn, ys::random_nonce());
  ys::Session sealer(sk, 'L', 'S');
  seeds.push_back(sealer.seal(ys::MsgType::heartbeat, kRun, ys::Heartbeat{1, 2}.encode()));
  ys::Hello hello;
  hello.learner_id = "isle";
  seeds.push_back(hello.seal(kKey, kRun, sn));
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
            case ys::MsgType::update: {
              const auto u = ys::UpdateMsg::decode(f.payload);
              if (u.numel <= 4096) {
                std::vector<float> held(u.numel, 1.0f);
                u.apply_to(held);
              }
              break;
            }
            case ys::MsgType::init: ys::Init::decode(f.payload); break;
            case ys::MsgType::holds: ys::Holds::decode(f.payload); break;
            case ys::MsgType::holding: ys::Holding::decode(f.payload); break;
            case ys::MsgType::heartbeat: ys::Heartbeat::decode(f.payload); break;
            case ys::MsgType::hello: ys::Hello::open(kKey, sn, f); break;
            default: break;
          }
          ys::Session opener(sk, 'S', 'L');
          opener.open(f);
        } catch (const ys::WireError&) {
          ++rejected;
        } catch (const ys::ProtocolError&) {  // does not open
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
