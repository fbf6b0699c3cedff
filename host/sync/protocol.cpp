#include "sync/protocol.hpp"

#include <sodium.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "core/crc32c.hpp"
#include "sync/quant.hpp"

namespace yeto::sync {

const char* msg_name(MsgType t) {
  switch (t) {
    case MsgType::challenge: return "challenge";
    case MsgType::hello: return "hello";
    case MsgType::welcome: return "welcome";
    case MsgType::init: return "init";
    case MsgType::fragment: return "fragment";
    case MsgType::push: return "push";
    case MsgType::push_ack: return "push_ack";
    case MsgType::heartbeat: return "heartbeat";
    case MsgType::leave: return "leave";
    case MsgType::final_cut: return "final_cut";
    case MsgType::final_ack: return "final_ack";
    case MsgType::error: return "error";
    case MsgType::done: return "done";
    case MsgType::update: return "update";
    case MsgType::holds: return "holds";
    case MsgType::holding: return "holding";
    case MsgType::init_request: return "init_request";
    case MsgType::merged: return "merged";
  }
  return "unknown";
}

namespace {
bool known_type(std::uint16_t t) { return t >= 1 && t <= 18; }
}  // namespace

std::uint32_t frame_crc(std::string_view header20, std::string_view payload) {
  return crc32c(header20.substr(0, 20)) ^ crc32c(payload);
}

void check_frame_crc(Frame& f) {
  if (!f.crc_pending) return;
  if (frame_crc(f.header, f.payload) != f.crc) throw ProtocolError("checksum mismatch");
  f.crc_pending = false;
}

bool is_bulk(MsgType t) {
  return t == MsgType::init || t == MsgType::fragment || t == MsgType::push || t == MsgType::final_cut ||
         t == MsgType::update || t == MsgType::holds || t == MsgType::holding;
}

std::string encode_frame(MsgType type, std::uint64_t run_id, std::string_view payload) {
  ByteWriter w;
  w.u32(kMagic);
  w.u16(kProtocolVersion);
  w.u16(static_cast<std::uint16_t>(type));
  w.u64(run_id);
  w.u32(static_cast<std::uint32_t>(payload.size()));
  w.u32(frame_crc(w.data(), payload));
  std::string out;
  out.reserve(kHeaderBytes + payload.size());
  out.append(w.data());
  out.append(payload);
  return out;
}

void FrameDecoder::feed(const char* data, std::size_t n) {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(data, n);
}

std::size_t FrameDecoder::wanted() const {
  const std::size_t have = buffered();
  if (have < kHeaderBytes) return kHeaderBytes - have;
  std::uint32_t len;
  std::memcpy(&len, buf_.data() + pos_ + 16, 4);
  const std::size_t total = kHeaderBytes + len;
  return total > have ? total - have : 1;
}

std::optional<Frame> FrameDecoder::next() {
  if (buffered() < kHeaderBytes) return std::nullopt;
  ByteReader r(std::string_view(buf_).substr(pos_, kHeaderBytes));
  const std::uint32_t magic = r.u32();
  const std::uint16_t version = r.u16();
  const std::uint16_t type = r.u16();
  const std::uint64_t run = r.u64();
  const std::uint32_t len = r.u32();
  const std::uint32_t crc = r.u32();
  if (magic != kMagic) throw ProtocolError("bad magic (not a Yeto sync frame)");
  if (version != kProtocolVersion)
    throw ProtocolError("protocol version " + std::to_string(version) + " is not supported (this build speaks " +
                        std::to_string(kProtocolVersion) + ")");
  if (!known_type(type)) throw ProtocolError("unknown message type " + std::to_string(type));
  if (run != run_id_) throw ProtocolError("frame belongs to another run");
  const auto t = static_cast<MsgType>(type);
  const std::size_t cap = is_bulk(t) ? max_frame_ : kControlCap;
  if (len > cap)
    throw ProtocolError(std::string(msg_name(t)) + " payload of " + std::to_string(len) + " bytes exceeds the cap of " +
                        std::to_string(cap));
  if (buffered() < kHeaderBytes + len) return std::nullopt;
  Frame f;
  f.type = t;
  f.run_id = run;
  f.header.assign(buf_, pos_, kHeaderBytes);
  f.payload.assign(buf_, pos_ + kHeaderBytes, len);
  f.crc = crc;
  f.crc_pending = true;
  if (len < defer_crc_from_) check_frame_crc(f);
  pos_ += kHeaderBytes + len;
  return f;
}

// ---- keys ----

namespace {
void sodium_ready() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) throw Error("libsodium failed to initialise");
}
}  // namespace

Key run_key_from_secret(std::string_view secret) {
  sodium_ready();
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.front()))) secret.remove_prefix(1);
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) secret.remove_suffix(1);
  if (secret.size() < 16)
    throw UsageError("the run secret is shorter than 16 bytes: write at least 16 random bytes (e.g. "
                     "`head -c 32 /dev/urandom | base64 > run.secret`)");
  Key k{};
  crypto_generichash(k.data(), k.size(), reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                     nullptr, 0);
  return k;
}

std::uint64_t run_id_from_name(std::string_view name) {
  sodium_ready();
  const std::string s = "yeto-run:" + std::string(name);
  unsigned char h[16];
  crypto_generichash(h, sizeof h, reinterpret_cast<const unsigned char*>(s.data()), s.size(), nullptr, 0);
  std::uint64_t id;
  std::memcpy(&id, h, 8);
  return id;
}

Nonce random_nonce() {
  sodium_ready();
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

Tag mac(const Key& key, std::string_view message) {
  static_assert(crypto_auth_BYTES == kTagBytes && crypto_auth_KEYBYTES == 32);
  sodium_ready();
  Tag t;
  crypto_auth(t.data(), reinterpret_cast<const unsigned char*>(message.data()), message.size(), key.data());
  return t;
}

bool mac_ok(const Key& key, std::string_view message, const unsigned char* tag) {
  sodium_ready();
  return crypto_auth_verify(tag, reinterpret_cast<const unsigned char*>(message.data()), message.size(), key.data()) ==
         0;
}

namespace {
Key derive(const Key& run_key, std::string_view label, const Nonce& server, const Nonce& client) {
  sodium_ready();
  crypto_generichash_state st;
  crypto_generichash_init(&st, run_key.data(), run_key.size(), 32);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(label.data()), label.size());
  crypto_generichash_update(&st, server.data(), server.size());
  crypto_generichash_update(&st, client.data(), client.size());
  Key k;
  crypto_generichash_final(&st, k.data(), k.size());
  return k;
}
}  // namespace

Key session_key(const Key& run_key, const Nonce& server, const Nonce& client) {
  return derive(run_key, "session:", server, client);
}

Key hello_key(const Key& run_key, const Nonce& server, const Nonce& client) {
  return derive(run_key, "hello:", server, client);
}

namespace {
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == sizeof(Key));
static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == kSealBytes);
using AeadNonce = std::array<unsigned char, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES>;

// Direction byte, then the little-endian u64 sequence number, then zeros. Unique per key: every
// session key is fresh (both nonces), and each direction counts its own frames.
AeadNonce frame_nonce(char dir, std::uint64_t seq) {
  AeadNonce n{};
  n[0] = static_cast<unsigned char>(dir);
  for (int i = 0; i < 8; ++i) n[1 + i] = static_cast<unsigned char>(seq >> (8 * i));
  return n;
}

// The 20 header bytes that precede the CRC, for a payload of `len` bytes (ciphertext and tag).
std::string header20(MsgType type, std::uint64_t run_id, std::size_t len) {
  if (len > 0xFFFFFFFFu) throw ProtocolError(std::string(msg_name(type)) + " payload does not fit a frame");
  ByteWriter h;
  h.u32(kMagic);
  h.u16(kProtocolVersion);
  h.u16(static_cast<std::uint16_t>(type));
  h.u64(run_id);
  h.u32(static_cast<std::uint32_t>(len));
  return h.take();
}

// A frame whose payload is `clear` (sent as is), then `plain` encrypted under `key` and `nonce`,
// then the tag. The additional data is the header bytes 0..19 followed by `clear`. The plaintext
// is encrypted straight into the frame; the CRC is set last.
std::string seal_frame(const Key& key, const AeadNonce& nonce, MsgType type, std::uint64_t run_id,
                       std::string_view clear, std::string_view plain) {
  const std::size_t len = clear.size() + plain.size() + kSealBytes;
  std::string out;
  out.resize(kHeaderBytes + len);
  const std::string h = header20(type, run_id, len);
  std::memcpy(out.data(), h.data(), h.size());
  if (!clear.empty()) std::memcpy(out.data() + kHeaderBytes, clear.data(), clear.size());
  const std::string ad = h + std::string(clear);
  auto* c = reinterpret_cast<unsigned char*>(out.data() + kHeaderBytes + clear.size());
  crypto_aead_xchacha20poly1305_ietf_encrypt_detached(c, c + plain.size(), nullptr,
                                                      reinterpret_cast<const unsigned char*>(plain.data()),
                                                      plain.size(), reinterpret_cast<const unsigned char*>(ad.data()),
                                                      ad.size(), nullptr, nonce.data(), key.data());
  const std::uint32_t crc = frame_crc(h, std::string_view(out).substr(kHeaderBytes));
  std::memcpy(out.data() + 20, &crc, 4);
  return out;
}

// Verifies and decrypts `sealed` (ciphertext then tag) in place under additional data `ad`,
// leaving the plaintext in its first size() - kSealBytes bytes. False when it does not open.
bool open_in_place(const Key& key, const AeadNonce& nonce, std::string_view ad, char* sealed, std::size_t size) {
  if (size < kSealBytes) return false;
  const std::size_t n = size - kSealBytes;
  auto* c = reinterpret_cast<unsigned char*>(sealed);
  return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(c, nullptr, c, n, c + n,
                                                             reinterpret_cast<const unsigned char*>(ad.data()),
                                                             ad.size(), nonce.data(), key.data()) == 0;
}

// The hello box's nonce: its key is used for that one box only.
AeadNonce hello_nonce() {
  AeadNonce n{};
  n[0] = 'H';
  return n;
}
}  // namespace

Session::~Session() { sodium_memzero(key_.data(), key_.size()); }

std::string Session::seal(MsgType type, std::uint64_t run_id, std::string_view payload) {
  sodium_ready();
  return seal_frame(key_, frame_nonce(send_dir_, send_seq_++), type, run_id, {}, payload);
}

std::string Session::open(Frame&& f) {
  std::string out = open_at(std::move(f), recv_seq_);
  ++recv_seq_;
  return out;
}

std::string Session::open_at(Frame&& f, std::uint64_t seq) const {
  check_frame_crc(f);
  if (f.payload.size() < kSealBytes)
    throw ProtocolError(std::string(msg_name(f.type)) + " frame is too short to be sealed");
  if (f.header.size() < 20 ||
      !open_in_place(key_, frame_nonce(recv_dir_, seq), std::string_view(f.header).substr(0, 20),
                     f.payload.data(), f.payload.size()))
    throw ProtocolError(std::string(msg_name(f.type)) +
                        " frame failed authentication (it does not decrypt under this connection's key at sequence " +
                        std::to_string(seq) + ": forged, tampered, replayed, reordered or reflected)");
  f.payload.resize(f.payload.size() - kSealBytes);
  return std::move(f.payload);
}

std::string Session::open(const Frame& f) { return open(Frame(f)); }

// ---- messages ----

namespace {
template <std::size_t N>
void put_arr(ByteWriter& w, const std::array<unsigned char, N>& a) { w.bytes(a.data(), N); }
template <std::size_t N>
void get_arr(ByteReader& r, std::array<unsigned char, N>& a) { std::memcpy(a.data(), r.raw(N).data(), N); }
}  // namespace

std::string Challenge::encode() const {
  ByteWriter w;
  put_arr(w, server_nonce);
  return w.take();
}
Challenge Challenge::decode(std::string_view p) {
  ByteReader r(p);
  Challenge c;
  get_arr(r, c.server_nonce);
  r.expect_end();
  return c;
}

std::string Hello::seal(const Key& run_key, std::uint64_t run_id, const Nonce& server) const {
  if (learner_id.size() > kMaxLearnerId)
    throw WireError("hello: the learner id is longer than " + std::to_string(kMaxLearnerId) + " bytes");
  ByteWriter w;
  w.str(learner_id);
  w.u64(layout_fp);
  std::string inner = w.take();
  inner.resize(kHelloBoxPlain, '\0');
  Key k = hello_key(run_key, server, client_nonce);
  const std::string frame =
      seal_frame(k, hello_nonce(), MsgType::hello, run_id,
                 std::string_view(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size()), inner);
  sodium_memzero(k.data(), k.size());
  sodium_memzero(inner.data(), inner.size());
  return frame;
}

Nonce Hello::client_nonce_of(const Frame& f) {
  if (f.payload.size() != kHelloPayload)
    throw WireError("hello: payload of " + std::to_string(f.payload.size()) + " bytes, expected " +
                    std::to_string(kHelloPayload));
  Nonce n;
  std::memcpy(n.data(), f.payload.data(), n.size());
  return n;
}

std::optional<Hello> Hello::open(const Key& run_key, const Nonce& server, const Frame& f) {
  Hello h;
  h.client_nonce = client_nonce_of(f);
  if (f.header.size() < 20) throw WireError("hello: header is truncated");
  const std::string ad = f.header.substr(0, 20) + f.payload.substr(0, kNonceBytes);
  std::string box = f.payload.substr(kNonceBytes);
  Key k = hello_key(run_key, server, h.client_nonce);
  const bool ok = open_in_place(k, hello_nonce(), ad, box.data(), box.size());
  sodium_memzero(k.data(), k.size());
  if (!ok) return std::nullopt;
  ByteReader r(std::string_view(box).substr(0, kHelloBoxPlain));
  h.learner_id = r.str(kMaxLearnerId);
  h.layout_fp = r.u64();
  while (r.remaining() > 0)
    if (r.u8() != 0) throw WireError("hello: the padding of the box is not zero");
  return h;
}

std::string Welcome::signed_text(std::uint64_t run_id, const Nonce& server, const Nonce& client) {
  ByteWriter w;
  w.bytes("welcome", 7);
  w.u64(run_id);
  put_arr(w, server);
  put_arr(w, client);
  return w.take();
}
const char* init_ask_name(InitAsk a) {
  switch (a) {
    case InitAsk::none: return "none";
    case InitAsk::send: return "send";
    case InitAsk::pending: return "pending";
  }
  return "unknown";
}

std::string Welcome::encode() const {
  ByteWriter w;
  put_arr(w, tag);
  w.u8(static_cast<std::uint8_t>(init));
  w.u32(static_cast<std::uint32_t>(versions.size()));
  for (auto v : versions) w.u64(v);
  return w.take();
}
Welcome Welcome::decode(std::string_view p) {
  ByteReader r(p);
  Welcome m;
  get_arr(r, m.tag);
  const std::uint8_t ask = r.u8();
  if (ask > static_cast<std::uint8_t>(InitAsk::pending))
    throw WireError("welcome: unknown init request " + std::to_string(ask));
  m.init = static_cast<InitAsk>(ask);
  const std::uint32_t n = r.u32();
  if (n > r.remaining() / 8) throw WireError("welcome: version list is truncated");
  for (std::uint32_t i = 0; i < n; ++i) m.versions.push_back(r.u64());
  r.expect_end();
  return m;
}

std::string Init::encode() const {
  ByteWriter w;
  w.u8(pattern == FragmentPattern::binpack ? 0 : 1);
  w.u32(fragments);
  w.u32(static_cast<std::uint32_t>(tensors.size()));
  for (const auto& t : tensors) {
    w.str(t.name);
    w.u64(t.numel);
  }
  w.u64(params.size());
  // Blocks of kInitBlock values, each all +0.0 (every byte zero) or stored: a LoRA's initial
  // state is half zeros (PEFT's B). Sent raw when that saves nothing.
  const std::size_t nblocks = (params.size() + kInitBlock - 1) / kInitBlock;
  std::vector<std::uint8_t> bitmap((nblocks + 7) / 8, 0);
  std::size_t stored = 0;
  for (std::size_t b = 0; b < nblocks; ++b) {
    const std::size_t lo = b * kInitBlock, n = std::min<std::size_t>(kInitBlock, params.size() - lo);
    bool zero = true;
    for (std::size_t i = 0; i < n && zero; ++i) zero = std::bit_cast<std::uint32_t>(params[lo + i]) == 0;
    if (!zero) {
      bitmap[b / 8] = static_cast<std::uint8_t>(bitmap[b / 8] | (1u << (b % 8)));
      stored += n;
    }
  }
  const std::size_t sparse_bytes = 4 + bitmap.size() + stored * 4;
  if (sparse_bytes >= params.size() * 4 || params.size() * 4 > kInitMaxExpansion * sparse_bytes) {
    w.u8(0);
    w.floats(params);
    return w.take();
  }
  w.u8(1);
  w.u32(kInitBlock);
  w.bytes(bitmap.data(), bitmap.size());
  for (std::size_t b = 0; b < nblocks; ++b)
    if (bitmap[b / 8] >> (b % 8) & 1u) {
      const std::size_t lo = b * kInitBlock, n = std::min<std::size_t>(kInitBlock, params.size() - lo);
      w.floats(std::span<const float>(params.data() + lo, n));
    }
  return w.take();
}
Init Init::decode(std::string_view p) {
  ByteReader r(p);
  Init m;
  const std::uint8_t pat = r.u8();
  if (pat > 1) throw WireError("init: unknown fragment pattern");
  m.pattern = pat == 0 ? FragmentPattern::binpack : FragmentPattern::strided;
  m.fragments = r.u32();
  const std::uint32_t n = r.u32();
  if (n > r.remaining() / 12) throw WireError("init: tensor list is truncated");
  std::uint64_t total = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    TensorSpec t;
    t.name = r.str(kMaxTensorName);
    t.numel = r.u64();
    if (t.numel > (1ull << 40)) throw WireError("init: tensor " + t.name + " is implausibly large");
    total += t.numel;
    m.tensors.push_back(std::move(t));
  }
  const std::uint64_t count = r.u64();
  if (count != total) throw WireError("init: parameter count does not match the tensor list");
  const std::uint8_t encoding = r.u8();
  if (encoding == 0) {
    m.params = r.floats(count);
  } else if (encoding == 1) {
    const std::uint32_t block = r.u32();
    if (block != kInitBlock) throw WireError("init: zero-block size " + std::to_string(block) + " is not " + std::to_string(kInitBlock));
    // Bounded before allocating: the values may be at most kInitMaxExpansion times the message.
    if (count / kInitMaxExpansion > p.size() / 4) throw WireError("init: the zero blocks expand implausibly far");
    const std::uint64_t nblocks = (count + block - 1) / block;
    const std::string_view bitmap = r.raw(static_cast<std::size_t>((nblocks + 7) / 8));
    if (nblocks % 8 != 0 && (static_cast<std::uint8_t>(bitmap.back()) >> (nblocks % 8)) != 0)
      throw WireError("init: zero-block bitmap has bits past the last block");
    m.params.assign(count, 0.0f);
    for (std::uint64_t b = 0; b < nblocks; ++b)
      if (static_cast<std::uint8_t>(bitmap[b / 8]) >> (b % 8) & 1u) {
        const std::uint64_t lo = b * block, len = std::min<std::uint64_t>(block, count - lo);
        if (len > r.remaining() / 4) throw WireError("init: stored blocks run past the end of the message");
        std::memcpy(m.params.data() + lo, r.raw(len * 4).data(), len * 4);
      }
  } else {
    throw WireError("init: unknown value encoding " + std::to_string(encoding));
  }
  r.expect_end();
  return m;
}

std::string FragmentMsg::encode() const { return encode(fragment, version, data); }
std::string FragmentMsg::encode(std::uint32_t fragment, std::uint64_t version, std::span<const float> data) {
  ByteWriter w;
  w.u32(fragment);
  w.u64(version);
  w.u64(data.size());
  w.floats(data);
  return w.take();
}
FragmentMsg FragmentMsg::decode(std::string_view p) {
  ByteReader r(p);
  FragmentMsg m;
  m.fragment = r.u32();
  m.version = r.u64();
  m.data = r.floats(r.u64());
  r.expect_end();
  return m;
}

const char* delta_encoding_name(DeltaEncoding e) {
  switch (e) {
    case DeltaEncoding::q4: return "q4";
    case DeltaEncoding::f32: return "f32";
    case DeltaEncoding::q2: return "q2";
  }
  return "unknown";
}

std::uint64_t quantised_bytes(DeltaEncoding e, std::uint64_t numel, std::uint32_t block) {
  return e == DeltaEncoding::q2 ? q2_encoded_bytes(numel, block) : q4_encoded_bytes(numel, block);
}

namespace {

bool quantised(DeltaEncoding e) { return e == DeltaEncoding::q4 || e == DeltaEncoding::q2; }

// body = scales (float32 per block), then codes.
std::string quantise(DeltaEncoding e, std::span<const float> x, std::uint32_t block) {
  const std::uint64_t nb = q4_blocks(x.size(), block);
  std::string body(quantised_bytes(e, x.size(), block), '\0');
  std::vector<float> scales(nb);
  auto* codes = reinterpret_cast<std::uint8_t*>(body.data() + nb * 4);
  if (e == DeltaEncoding::q2) q2_encode_into(x, block, scales.data(), codes);
  else q4_encode_into(x, block, scales.data(), codes);
  std::memcpy(body.data(), scales.data(), nb * 4);
  return body;
}

// What every quantised body must satisfy before a byte of it is read: a quantised encoding, a
// block size in range, a count within the cap and a body of exactly the encoded size. `what`
// ("push", "update") starts the WireError's message.
void check_quantised_body(const char* what, DeltaEncoding e, std::uint64_t numel, std::uint32_t block,
                          std::size_t body_bytes) {
  if (!quantised(e)) throw WireError(std::string(what) + ": the encoding must be q4 or q2");
  const std::string name = std::string(what) + ": " + delta_encoding_name(e);
  if (block < 2 || block > (1u << 24)) throw WireError(name + " block size out of range");
  if (numel > (1ull << 40) || body_bytes != quantised_bytes(e, numel, block))
    throw WireError(name + " body has the wrong size for " + std::to_string(numel) + " values");
}

// The decoded values of a quantised body, checked first (before anything is allocated).
std::vector<float> dequantise(DeltaEncoding e, std::uint64_t numel, std::uint32_t block, const std::string& body,
                              const char* what) {
  check_quantised_body(what, e, numel, block, body.size());
  std::vector<float> out(numel);
  const std::uint64_t nb = q4_blocks(numel, block);
  std::vector<float> scales(nb);
  std::memcpy(scales.data(), body.data(), nb * 4);
  const auto* codes = reinterpret_cast<const std::uint8_t*>(body.data() + nb * 4);
  try {
    if (e == DeltaEncoding::q2) q2_decode_into(numel, block, scales.data(), codes, out);
    else q4_decode_into(numel, block, scales.data(), codes, out);
  } catch (const Error& err) {
    throw WireError(std::string(what) + ": " + err.what());
  }
  return out;
}

}  // namespace

std::string Push::encode() const {
  ByteWriter w;
  w.u32(fragment);
  w.u64(base_version);
  w.u64(samples);
  w.u32(inner_steps);
  w.u64(numel);
  w.u8(static_cast<std::uint8_t>(encoding));
  w.u32(block);
  w.u64(body.size());
  w.bytes(body.data(), body.size());
  return w.take();
}
Push Push::decode(std::string_view p) {
  ByteReader r(p);
  Push m;
  m.fragment = r.u32();
  m.base_version = r.u64();
  m.samples = r.u64();
  m.inner_steps = r.u32();
  m.numel = r.u64();
  const std::uint8_t enc = r.u8();
  if (enc > 2) throw WireError("push: unknown delta encoding " + std::to_string(enc));
  m.encoding = static_cast<DeltaEncoding>(enc);
  m.block = r.u32();
  const std::uint64_t n = r.u64();
  if (n > r.remaining()) throw WireError("push: body is truncated");
  m.body = std::string(r.raw(n));
  r.expect_end();
  return m;
}
std::vector<float> Push::delta() const {
  std::vector<float> out;
  if (encoding == DeltaEncoding::f32) {
    if (body.size() != numel * 4) throw WireError("push: f32 body has the wrong size");
    out.resize(numel);
    std::memcpy(out.data(), body.data(), body.size());
    return out;
  }
  return dequantise(encoding, numel, block, body, "push");
}
Push Push::from_delta_quantised(DeltaEncoding encoding, std::uint32_t fragment, std::uint64_t base,
                                std::uint64_t samples, std::uint32_t inner_steps, std::span<const float> delta,
                                std::uint32_t block) {
  if (!quantised(encoding)) throw Error("Push::from_delta_quantised: the encoding must be q4 or q2");
  Push m;
  m.fragment = fragment;
  m.base_version = base;
  m.samples = samples;
  m.inner_steps = inner_steps;
  m.numel = delta.size();
  m.encoding = encoding;
  m.block = block;
  m.body = quantise(encoding, delta, block);
  return m;
}
Push Push::from_delta_f32(std::uint32_t fragment, std::uint64_t base, std::uint64_t samples, std::uint32_t inner_steps,
                          std::span<const float> delta) {
  Push m;
  m.fragment = fragment;
  m.base_version = base;
  m.samples = samples;
  m.inner_steps = inner_steps;
  m.numel = delta.size();
  m.encoding = DeltaEncoding::f32;
  m.body.assign(reinterpret_cast<const char*>(delta.data()), delta.size() * 4);
  return m;
}

std::string UpdateMsg::encode() const {
  ByteWriter w;
  w.u32(fragment);
  w.u64(base_version);
  w.u64(version);
  w.u64(numel);
  w.u32(block);
  w.u8(static_cast<std::uint8_t>(encoding));
  w.u32(crc);
  w.u64(body.size());
  w.bytes(body.data(), body.size());
  return w.take();
}
UpdateMsg UpdateMsg::decode(std::string_view p) {
  ByteReader r(p);
  UpdateMsg m;
  m.fragment = r.u32();
  m.base_version = r.u64();
  m.version = r.u64();
  m.numel = r.u64();
  m.block = r.u32();
  const std::uint8_t enc = r.u8();
  if (enc != static_cast<std::uint8_t>(DeltaEncoding::q4) && enc != static_cast<std::uint8_t>(DeltaEncoding::q2))
    throw WireError("update: unknown encoding " + std::to_string(enc) + " (q4 or q2)");
  m.encoding = static_cast<DeltaEncoding>(enc);
  m.crc = r.u32();
  const std::uint64_t n = r.u64();
  if (n > r.remaining()) throw WireError("update: body is truncated");
  m.body = std::string(r.raw(n));
  r.expect_end();
  if (m.version != m.base_version + 1)
    throw WireError("update: version " + std::to_string(m.version) + " does not follow its base version " +
                    std::to_string(m.base_version));
  check_quantised_body("update", m.encoding, m.numel, m.block, m.body.size());
  return m;
}
void UpdateMsg::apply_to(std::span<float> pub) const {
  if (pub.size() != numel)
    throw WireError("update: " + std::to_string(numel) + " values for a fragment of " + std::to_string(pub.size()));
  const std::vector<float> u = dequantise(encoding, numel, block, body, "update");
  // One IEEE float32 addition per value: the same bytes whatever the vector width.
  for (std::size_t i = 0; i < pub.size(); ++i) pub[i] = pub[i] + u[i];
}

std::uint32_t public_crc(std::span<const float> pub) {
  return crc32c(std::string_view(reinterpret_cast<const char*>(pub.data()), pub.size() * 4));
}

Published publish_update(std::uint32_t fragment, std::uint64_t base_version, std::uint64_t version,
                         std::span<const float> theta, std::vector<float>& pub, std::uint32_t block,
                         DeltaEncoding encoding) {
  if (!quantised(encoding)) throw Error("publish_update: the encoding must be q4 or q2");
  if (theta.size() != pub.size()) throw Error("publish_update: the public state has another size than the master");
  Published out;
  std::vector<float> u(theta.size());
  bool finite = true;
  for (std::size_t i = 0; i < u.size(); ++i) {
    u[i] = theta[i] - pub[i];
    finite = finite && std::isfinite(u[i]);
    out.update_max = std::max(out.update_max, std::fabs(u[i]));
  }
  if (!finite) {
    std::copy(theta.begin(), theta.end(), pub.begin());
    out.update_max = std::numeric_limits<float>::infinity();
    return out;
  }
  UpdateMsg m;
  m.fragment = fragment;
  m.base_version = base_version;
  m.version = version;
  m.numel = u.size();
  m.block = block;
  m.encoding = encoding;
  m.body = quantise(encoding, u, block);
  m.apply_to(pub);  // exactly what every learner does with the message
  for (std::size_t i = 0; i < u.size(); ++i) out.residual_max = std::max(out.residual_max, std::fabs(theta[i] - pub[i]));
  m.crc = public_crc(pub);
  out.update = std::move(m);
  return out;
}

const char* push_status_name(PushStatus s) {
  switch (s) {
    case PushStatus::accepted: return "accepted";
    case PushStatus::too_stale: return "too_stale";
    case PushStatus::invalid: return "invalid";
    case PushStatus::duplicate: return "duplicate";
    case PushStatus::finished: return "finished";
  }
  return "unknown";
}

std::string PushAck::encode() const {
  ByteWriter w;
  w.u32(fragment);
  w.u8(static_cast<std::uint8_t>(status));
  w.u64(version);
  return w.take();
}
PushAck PushAck::decode(std::string_view p) {
  ByteReader r(p);
  PushAck m;
  m.fragment = r.u32();
  const std::uint8_t s = r.u8();
  if (s > 4) throw WireError("push_ack: unknown status");
  m.status = static_cast<PushStatus>(s);
  m.version = r.u64();
  r.expect_end();
  return m;
}

std::string MergedMsg::encode() const {
  ByteWriter w;
  w.u32(fragment);
  w.u64(version);
  w.u64(push_base);
  return w.take();
}
MergedMsg MergedMsg::decode(std::string_view p) {
  ByteReader r(p);
  MergedMsg m;
  m.fragment = r.u32();
  m.version = r.u64();
  m.push_base = r.u64();
  r.expect_end();
  if (m.version <= m.push_base) throw WireError("merged: version does not follow the push's base");
  return m;
}

std::string Heartbeat::encode() const {
  ByteWriter w;
  w.u64(step);
  w.u64(samples);
  return w.take();
}
Heartbeat Heartbeat::decode(std::string_view p) {
  ByteReader r(p);
  Heartbeat m;
  m.step = r.u64();
  m.samples = r.u64();
  r.expect_end();
  return m;
}

std::array<unsigned char, 32> state_digest(const std::vector<std::uint64_t>& versions,
                                           const std::vector<std::vector<float>>& fragments) {
  sodium_ready();
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, 32);
  for (std::size_t i = 0; i < fragments.size(); ++i) {
    const std::uint64_t v = i < versions.size() ? versions[i] : 0;
    const std::uint64_t n = fragments[i].size();
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(&v), 8);
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(&n), 8);
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(fragments[i].data()), n * 4);
  }
  std::array<unsigned char, 32> d;
  crypto_generichash_final(&st, d.data(), d.size());
  return d;
}

std::string hex(const unsigned char* p, std::size_t n) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s.push_back(k[p[i] >> 4]);
    s.push_back(k[p[i] & 15]);
  }
  return s;
}

std::string FinalCut::encode() const { return encode({}); }
std::string FinalCut::encode(const std::vector<bool>& omit) const {
  ByteWriter w;
  w.u32(static_cast<std::uint32_t>(fragments.size()));
  for (std::size_t i = 0; i < fragments.size(); ++i) {
    w.u64(versions[i]);
    if (i < omit.size() && omit[i]) {
      w.u64(0);
      continue;
    }
    w.u64(fragments[i].size());
    w.floats(fragments[i]);
  }
  put_arr(w, digest);
  return w.take();
}
std::size_t FinalCut::encoded_size(const std::vector<bool>& omit) const {
  std::size_t n = 4 + 32;
  for (std::size_t i = 0; i < fragments.size(); ++i)
    n += 16 + ((i < omit.size() && omit[i]) ? 0 : fragments[i].size() * 4);
  return n;
}
FinalCut FinalCut::decode(std::string_view p) {
  ByteReader r(p);
  FinalCut m;
  const std::uint32_t n = r.u32();
  if (n > r.remaining() / 16) throw WireError("final_cut: fragment list is truncated");
  for (std::uint32_t i = 0; i < n; ++i) {
    m.versions.push_back(r.u64());
    m.fragments.push_back(r.floats(r.u64()));
  }
  get_arr(r, m.digest);
  r.expect_end();
  return m;
}

std::array<unsigned char, 32> fragment_digest(std::uint64_t version, std::span<const float> values) {
  // The bytes state_digest hashes for a single fragment, without copying the values.
  sodium_ready();
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, 32);
  const std::uint64_t n = values.size();
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(&version), 8);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(&n), 8);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(values.data()), n * 4);
  std::array<unsigned char, 32> d;
  crypto_generichash_final(&st, d.data(), d.size());
  return d;
}

std::string Holds::encode() const {
  ByteWriter w;
  w.u32(static_cast<std::uint32_t>(claims.size()));
  for (const auto& c : claims) {
    w.u64(c.version);
    put_arr(w, c.digest);
  }
  return w.take();
}
Holds Holds::decode(std::string_view p) {
  ByteReader r(p);
  Holds m;
  const std::uint32_t n = r.u32();
  if (n > r.remaining() / 40) throw WireError("holds: claim list is truncated");
  m.claims.resize(n);
  for (auto& c : m.claims) {
    c.version = r.u64();
    get_arr(r, c.digest);
  }
  r.expect_end();
  return m;
}

std::string Holding::encode() const {
  ByteWriter w;
  w.u32(static_cast<std::uint32_t>(fragments.size()));
  for (const auto f : fragments) w.u32(f);
  return w.take();
}
Holding Holding::decode(std::string_view p) {
  ByteReader r(p);
  Holding m;
  const std::uint32_t n = r.u32();
  if (n > r.remaining() / 4) throw WireError("holding: fragment list is truncated");
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t f = r.u32();
    if (!m.fragments.empty() && f <= m.fragments.back()) throw WireError("holding: fragments are not ascending");
    m.fragments.push_back(f);
  }
  r.expect_end();
  return m;
}

std::string FinalAck::encode() const {
  ByteWriter w;
  put_arr(w, digest);
  return w.take();
}
FinalAck FinalAck::decode(std::string_view p) {
  ByteReader r(p);
  FinalAck m;
  get_arr(r, m.digest);
  r.expect_end();
  return m;
}

std::string ErrorMsg::encode() const {
  ByteWriter w;
  w.u16(code);
  w.str(message);
  return w.take();
}
ErrorMsg ErrorMsg::decode(std::string_view p) {
  ByteReader r(p);
  ErrorMsg m;
  m.code = r.u16();
  m.message = r.str(kControlCap);
  r.expect_end();
  return m;
}

}  // namespace yeto::sync
