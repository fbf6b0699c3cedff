// The syncer wire protocol (docs/PROTOCOL.md is its specification). Every message is one
// frame: a 24-byte little-endian header
//     magic "YSYN" | version u16 | type u16 | run id u64 | payload length u32 | CRC-32C u32
// followed by the payload. The CRC is CRC-32C(header bytes 0..19) XOR CRC-32C(payload). After
// the challenge-response handshake every payload is sealed with XChaCha20-Poly1305 (libsodium
// IETF AEAD) under a per-connection session key: the nonce is the direction and a
// per-direction sequence number, the additional data the header bytes 0..19, so frames can
// neither be read nor forged, replayed, reordered or reflected by anyone without the run
// secret. The hello that opens a connection is sealed the same way under a hello key, so
// the learner id and layout fingerprint never cross the wire in clear.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sync/layout.hpp"
#include "sync/wire.hpp"

namespace yeto::sync {

inline constexpr std::uint32_t kMagic = 0x4E595359;  // "YSYN" as little-endian bytes
inline constexpr std::uint16_t kProtocolVersion = 7;
inline constexpr std::size_t kHeaderBytes = 24;
inline constexpr std::size_t kTagBytes = 32;   // handshake MAC (welcome)
inline constexpr std::size_t kSealBytes = 16;  // AEAD tag that ends every sealed payload
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kControlCap = 4096;    // payload cap of every control message
inline constexpr std::size_t kMaxLearnerId = 128;
inline constexpr std::size_t kMaxTensorName = 1024;

enum class MsgType : std::uint16_t {
  challenge = 1,
  hello = 2,
  welcome = 3,
  init = 4,
  fragment = 5,
  push = 6,
  push_ack = 7,
  heartbeat = 8,
  leave = 9,
  final_cut = 10,
  final_ack = 11,
  error = 12,
  done = 13,  // the learner reached its own step budget; payload as heartbeat
  update = 14,  // a q4 / q2 update of a fragment on top of the version the learner holds (compressed downlink)
  holds = 15,    // the learner's claim of the public state it already holds, per fragment (after welcome)
  holding = 16,  // the fragments whose claim the syncer accepted: no catch-up is sent for them
  init_request = 17,  // the syncer asks a learner it welcomed with InitAsk::pending for `init` (empty payload)
  merged = 18,        // to a learner whose push a merge holds, before that merge's update (protocol 6)
};
const char* msg_name(MsgType t);
bool is_bulk(MsgType t);  // init, fragment, push, final_cut, update, holds, holding: capped by max_frame, not kControlCap

struct Frame {
  MsgType type{};
  std::uint64_t run_id = 0;
  std::string header;   // the 24 header bytes as received (bytes 0..19 are the AEAD's additional data)
  std::string payload;  // ciphertext and AEAD tag, when sealed
  // The CRC field, still to be checked (a bulk frame of a decoder with defer_crc_from): the
  // frame's owner checks it off the reading thread; Session::open always does.
  std::uint32_t crc = 0;
  bool crc_pending = false;
};

// Protocol violations: the connection is dropped and the reason logged.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// CRC field: CRC-32C(header bytes 0..19) XOR CRC-32C(payload).
std::uint32_t frame_crc(std::string_view header20, std::string_view payload);
std::string encode_frame(MsgType type, std::uint64_t run_id, std::string_view payload);
// Checks a frame's pending CRC (no-op when it was checked on decoding); throws ProtocolError.
void check_frame_crc(Frame& f);

// Incremental frame decoder for a byte stream. Rejects, as soon as the header is in: a wrong
// magic, version, unknown type, foreign run id, or a length above the cap of that type. The
// CRC is checked when the payload is complete. Never allocates more than the cap.
class FrameDecoder {
 public:
  FrameDecoder(std::uint64_t run_id, std::size_t max_frame) : run_id_(run_id), max_frame_(max_frame) {}
  void feed(const char* data, std::size_t n);
  // The next complete frame, or nullopt when more bytes are needed. Throws ProtocolError.
  std::optional<Frame> next();
  std::size_t buffered() const { return buf_.size() - pos_; }
  // Raised after authentication: unauthenticated peers are held to kControlCap.
  void set_max_frame(std::size_t cap) { max_frame_ = cap; }
  // Bytes the decoder needs before it can make progress (at least 1).
  std::size_t wanted() const;
  // Frames whose payload has at least n bytes are returned with their CRC unchecked
  // (Frame::crc_pending), for the owner to check on another thread. Default: none.
  void defer_crc_from(std::size_t n) { defer_crc_from_ = n; }

 private:
  std::uint64_t run_id_;
  std::size_t max_frame_;
  std::size_t defer_crc_from_ = static_cast<std::size_t>(-1);
  std::string buf_;
  std::size_t pos_ = 0;
};

// ---- keys and authentication (libsodium) ----

using Key = std::array<unsigned char, 32>;
using Nonce = std::array<unsigned char, kNonceBytes>;
using Tag = std::array<unsigned char, kTagBytes>;

// The run key is BLAKE2b-256 of the secret file's bytes (surrounding whitespace trimmed);
// throws UsageError when the secret is shorter than 16 bytes.
Key run_key_from_secret(std::string_view secret);
// Run id: 64 bits of BLAKE2b of "yeto-run:" + name. Frames of other runs are refused.
std::uint64_t run_id_from_name(std::string_view name);
Nonce random_nonce();
Tag mac(const Key& key, std::string_view message);
bool mac_ok(const Key& key, std::string_view message, const unsigned char* tag);
// Session key of one connection: BLAKE2b keyed with the run key over "session:" and both nonces.
Key session_key(const Key& run_key, const Nonce& server, const Nonce& client);
// Key of the hello box of one connection: the same over "hello:" and both nonces.
Key hello_key(const Key& run_key, const Nonce& server, const Nonce& client);

// Per-connection sealing of frames after the handshake. Direction 'S' (syncer to learner) or 'L'.
// XChaCha20-Poly1305 under the session key; nonce = direction byte, u64 sequence number of that
// direction, zeros; additional data = the header bytes 0..19 (whose length counts the tag).
class Session {
 public:
  Session(Key key, char send_dir, char recv_dir) : key_(key), send_dir_(send_dir), recv_dir_(recv_dir) {}
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session();  // wipes the key
  // A complete frame carrying `payload` encrypted, then the tag. The plaintext is read once,
  // encrypted straight into the frame.
  std::string seal(MsgType type, std::uint64_t run_id, std::string_view payload);
  // Decrypts the frame's payload in place and returns it (moved out of `f`, no copy); throws
  // ProtocolError when it does not open under this connection's key at the next sequence number
  // (forged, tampered, replayed, reordered or reflected).
  std::string open(Frame&& f);
  // The same on a copy of the payload.
  std::string open(const Frame& f);
  // Takes the next receive sequence number for a frame that open_at opens later, possibly on
  // another thread and after frames read behind it: sequence numbers follow the order frames
  // were read in, so the nonces still follow the wire order.
  std::uint64_t reserve_recv() { return recv_seq_++; }
  // open() at a reserved sequence number; touches no state of the session (any thread).
  std::string open_at(Frame&& f, std::uint64_t seq) const;

 private:
  Key key_;
  char send_dir_, recv_dir_;
  std::uint64_t send_seq_ = 0, recv_seq_ = 0;
};

// ---- messages ----

struct Challenge {
  Nonce server_nonce{};
  std::string encode() const;
  static Challenge decode(std::string_view p);
};

// The learner's hello: the client nonce in clear, then a box sealed with XChaCha20-Poly1305
// under hello_key(K, Ns, Nc) (nonce 'H' and zeros; additional data the header bytes 0..19
// and the client nonce)
// holding the learner id and the layout fingerprint, zero-padded to a fixed size so that the
// frame's length does not tell the id's length either. Only a holder of the run secret can
// seal a box that opens, and the box is bound to this connection's server nonce, so opening it
// authenticates the learner.
inline constexpr std::size_t kHelloBoxPlain = 4 + kMaxLearnerId + 8;
inline constexpr std::size_t kHelloPayload = kNonceBytes + kHelloBoxPlain + kSealBytes;

struct Hello {
  std::string learner_id;
  Nonce client_nonce{};
  std::uint64_t layout_fp = 0;
  // The complete hello frame answering challenge nonce `server`. Throws WireError when the
  // learner id is longer than kMaxLearnerId.
  std::string seal(const Key& run_key, std::uint64_t run_id, const Nonce& server) const;
  // The client nonce of a hello frame (readable without the key); WireError when the payload
  // does not have the hello's size.
  static Nonce client_nonce_of(const Frame& f);
  // Opens a hello frame: nullopt when the box does not open (another run secret, another
  // connection's hello, or tampered); WireError when the payload does not have the hello's size
  // or the box opens but its contents are malformed.
  static std::optional<Hello> open(const Key& run_key, const Nonce& server, const Frame& f);
};

// What a welcome asks of the learner about the run's initial state. While the syncer has no
// state it asks one connected learner at a time for `init`; the others wait for the state (or
// for an `init_request`, when the learner asked is gone before its `init` was taken).
enum class InitAsk : std::uint8_t {
  none = 0,     // the run has state: send `holds`
  send = 1,     // the syncer has no state and asks this learner for it: send `init`
  pending = 2,  // the syncer has no state and another learner was asked: send `holds`, send no `init`
};
const char* init_ask_name(InitAsk a);

struct Welcome {
  Tag tag{};              // proves the syncer holds the secret too: mac("welcome" | nonces)
  InitAsk init = InitAsk::none;
  std::vector<std::uint64_t> versions;  // current global version per fragment (empty without state)
  static std::string signed_text(std::uint64_t run_id, const Nonce& server, const Nonce& client);
  std::string encode() const;
  static Welcome decode(std::string_view p);
};

// `init`'s values travel in blocks of kInitBlock, all-zero blocks left out (encoding 1), unless
// that saves nothing or would expand more than kInitMaxExpansion-fold (encoding 0: raw float32).
inline constexpr std::uint32_t kInitBlock = 256;
inline constexpr std::uint64_t kInitMaxExpansion = 64;
struct Init {
  FragmentPattern pattern = FragmentPattern::binpack;
  std::uint32_t fragments = 1;
  std::vector<TensorSpec> tensors;
  std::vector<float> params;  // every tensor, canonical order, exact
  std::string encode() const;
  static Init decode(std::string_view p);
};

struct FragmentMsg {
  std::uint32_t fragment = 0;
  std::uint64_t version = 0;
  std::vector<float> data;  // exact float32
  std::string encode() const;
  // The same bytes without a FragmentMsg (no copy of the values).
  static std::string encode(std::uint32_t fragment, std::uint64_t version, std::span<const float> data);
  static FragmentMsg decode(std::string_view p);
};

// How a push's pseudo-gradient or a downlink update travels: q4 or q2 (sync/quant.hpp, with
// the message's block size) or exact float32 (pushes only).
enum class DeltaEncoding : std::uint8_t { q4 = 0, f32 = 1, q2 = 2 };
const char* delta_encoding_name(DeltaEncoding e);
// The body size of numel values in a quantised encoding (q4 or q2) with `block`.
std::uint64_t quantised_bytes(DeltaEncoding e, std::uint64_t numel, std::uint32_t block);

// The compressed downlink. The syncer keeps, per fragment, its exact master θ and the public
// state P that every learner holds. After a merge it sends u = θ − P quantised (q4, or q2 with
// sync.downlink = q2); the syncer and every learner add the decoded update to P in float32,
// element by element, in the same way (UpdateMsg::apply_to), so all of them hold P bit for bit,
// and θ − P (what the code dropped) is carried into the next update (error feedback).
struct UpdateMsg {
  std::uint32_t fragment = 0;
  std::uint64_t base_version = 0;  // the version of P the update applies on top of
  std::uint64_t version = 0;       // the version it produces
  std::uint64_t numel = 0;
  std::uint32_t block = 0;         // quantisation block size
  DeltaEncoding encoding = DeltaEncoding::q4;  // q4 or q2
  std::uint32_t crc = 0;           // CRC-32C of the resulting P's float32 bytes
  std::string body;                // scales, then codes
  std::string encode() const;
  // Throws WireError for a malformed message: truncated, trailing bytes, a block size out of
  // range, an encoding other than q4 or q2, a body whose size does not match numel and block, or
  // a version that does not follow its base.
  static UpdateMsg decode(std::string_view p);
  // P += decoded update, in float32, value by value. Throws WireError (P untouched) for a
  // malformed body (wrong size, a NaN/Inf/negative scale, a zero nibble of q4, non-zero padding
  // bits of q2) or P of another size.
  void apply_to(std::span<float> pub) const;
};

// CRC-32C of a public state's float32 bytes (what UpdateMsg::crc names).
std::uint32_t public_crc(std::span<const float> pub);

// What the syncer published after a merge: the update (none when θ − P is not finite, i.e.
// values near FLT_MAX: P is then set to θ and sent in full), the largest |θ − P| before
// (update_max) and after (residual_max) it.
struct Published {
  std::optional<UpdateMsg> update;
  float update_max = 0;
  float residual_max = 0;
};
// The syncer's side of the compressed downlink: u = θ − P (float32), quantised with `encoding`
// (q4 or q2) and `block`, then P += decoded u exactly as a learner does it.
Published publish_update(std::uint32_t fragment, std::uint64_t base_version, std::uint64_t version,
                         std::span<const float> theta, std::vector<float>& pub, std::uint32_t block,
                         DeltaEncoding encoding = DeltaEncoding::q4);


struct Push {
  std::uint32_t fragment = 0;
  std::uint64_t base_version = 0;
  std::uint64_t samples = 0;
  std::uint32_t inner_steps = 0;
  std::uint64_t numel = 0;
  DeltaEncoding encoding = DeltaEncoding::q4;
  std::uint32_t block = 0;          // quantisation block size (q4, q2)
  std::string body;                 // q4, q2: scales then codes; f32: numel floats
  std::string encode() const;
  static Push decode(std::string_view p);
  // Decoded delta; throws WireError for a malformed body (wrong size, bad code or scale).
  std::vector<float> delta() const;
  // Quantised with `encoding` (q4 or q2; f32 goes through from_delta_f32) and `block`.
  static Push from_delta_quantised(DeltaEncoding encoding, std::uint32_t fragment, std::uint64_t base,
                                   std::uint64_t samples, std::uint32_t inner_steps, std::span<const float> delta,
                                   std::uint32_t block);
  static Push from_delta_q4(std::uint32_t fragment, std::uint64_t base, std::uint64_t samples,
                            std::uint32_t inner_steps, std::span<const float> delta, std::uint32_t block) {
    return from_delta_quantised(DeltaEncoding::q4, fragment, base, samples, inner_steps, delta, block);
  }
  static Push from_delta_f32(std::uint32_t fragment, std::uint64_t base, std::uint64_t samples,
                             std::uint32_t inner_steps, std::span<const float> delta);
};

enum class PushStatus : std::uint8_t { accepted = 0, too_stale = 1, invalid = 2, duplicate = 3, finished = 4 };
const char* push_status_name(PushStatus s);

struct PushAck {
  std::uint32_t fragment = 0;
  PushStatus status = PushStatus::accepted;
  std::uint64_t version = 0;
  std::string encode() const;
  static PushAck decode(std::string_view p);
};

// Sent to each learner whose push a merge of `fragment` holds, just before the merge's update or
// fragment goes out on the same connection: `version` is the version the merge produced and
// `push_base` the base version of the learner's push it holds. A learner that keeps its own
// progress across merges (sync.carry) learns from it which of its pushes the new state counts.
struct MergedMsg {
  std::uint32_t fragment = 0;
  std::uint64_t version = 0;
  std::uint64_t push_base = 0;
  std::string encode() const;
  // Throws WireError for a malformed message (truncated, trailing bytes, a version that does
  // not follow the push's base).
  static MergedMsg decode(std::string_view p);
};

struct Heartbeat {
  std::uint64_t step = 0;
  std::uint64_t samples = 0;
  std::string encode() const;
  static Heartbeat decode(std::string_view p);
};

// The final cut: every fragment's public state P at its final version, and their digest. A
// fragment may be omitted (empty here, numel 0 on the wire) for a connection that was sent that
// exact version already: the learner takes its own copy (the syncer never omits one it has not
// sent on this connection; a learner that does not hold it reconnects for the full cut).
struct FinalCut {
  std::vector<std::uint64_t> versions;
  std::vector<std::vector<float>> fragments;
  std::array<unsigned char, 32> digest{};
  std::string encode() const;
  // With omit[p] set, fragment p is written as numel 0 (omit may be shorter: not omitted).
  std::string encode(const std::vector<bool>& omit) const;
  // The size of encode(omit), without encoding.
  std::size_t encoded_size(const std::vector<bool>& omit) const;
  static FinalCut decode(std::string_view p);
};

// The digest of one fragment's public state at a version (what `holds` claims):
// state_digest({version}, {values}).
std::array<unsigned char, 32> fragment_digest(std::uint64_t version, std::span<const float> values);

// `holds`, the learner's first message after a welcome that does not ask for `init`: per fragment, the
// version of the public state it already holds and that state's digest (kNoClaim: none). The
// syncer sends no catch-up for a claim that matches its current version and public state
// exactly (a learner that starts from the same initial state, or one that reconnects having
// missed nothing), and answers with `holding`, the accepted fragments, before any fragment.
struct FragmentClaim {
  std::uint64_t version = 0;
  std::array<unsigned char, 32> digest{};
};
inline constexpr std::uint64_t kNoClaim = ~std::uint64_t{0};
struct Holds {
  std::vector<FragmentClaim> claims;
  std::string encode() const;
  static Holds decode(std::string_view p);
};
struct Holding {
  std::vector<std::uint32_t> fragments;  // ascending, each < the run's fragment count
  std::string encode() const;
  static Holding decode(std::string_view p);
};

// BLAKE2b-256 over every fragment's version and exact bytes in fragment order.
std::array<unsigned char, 32> state_digest(const std::vector<std::uint64_t>& versions,
                                           const std::vector<std::vector<float>>& fragments);
std::string hex(const unsigned char* p, std::size_t n);

struct FinalAck {
  std::array<unsigned char, 32> digest{};
  std::string encode() const;
  static FinalAck decode(std::string_view p);
};

// The codes of `error`, the refusal the syncer sends before it drops a peer. All are final: a
// learner does not retry. Codes 1 and 2 refuse a handshake and are sent unsealed; code 3 refuses
// the `init` a learner was asked for (sealed: the message says why, e.g. non-finite values).
inline constexpr std::uint16_t kErrorLayoutMismatch = 1;
inline constexpr std::uint16_t kErrorAuthentication = 2;
inline constexpr std::uint16_t kErrorInitRefused = 3;

struct ErrorMsg {
  std::uint16_t code = 0;
  std::string message;
  std::string encode() const;
  static ErrorMsg decode(std::string_view p);
};

}  // namespace yeto::sync
