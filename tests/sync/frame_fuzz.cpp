// libFuzzer target for the syncer's frame decoder, the opening of sealed frames and hellos,
// and the message codecs: arbitrary bytes, split into arbitrary chunks, must only ever decode,
// wait or raise the protocol's own exception types (no crash, no overflow, no huge
// allocation). The keys are fixed, so a fuzzer can only reach the codecs behind the AEAD
// through the unsealed messages; the opening itself is exercised on every frame.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sync/protocol.hpp"

namespace ys = yeto::sync;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t chunk = 1 + data[0] % 64;
  const std::uint64_t run = 0x1122334455667788ull;
  static const ys::Key key = ys::run_key_from_secret("fuzz-run-secret-0123456789");
  static const ys::Nonce server{};
  static const ys::Key session = ys::session_key(key, server, ys::Nonce{});
  ys::FrameDecoder d(run, 1 << 16);
  const char* p = reinterpret_cast<const char*>(data + 1);
  const std::size_t n = size - 1;
  try {
    for (std::size_t i = 0; i < n; i += chunk) {
      d.feed(p + i, std::min(chunk, n - i));
      while (auto f = d.next()) {
        try {
          switch (f->type) {
            case ys::MsgType::challenge: ys::Challenge::decode(f->payload); break;
            case ys::MsgType::hello: ys::Hello::open(key, server, *f); break;
            case ys::MsgType::welcome: ys::Welcome::decode(f->payload); break;
            case ys::MsgType::init: ys::Init::decode(f->payload); break;
            case ys::MsgType::fragment: ys::FragmentMsg::decode(f->payload); break;
            case ys::MsgType::push: ys::Push::decode(f->payload).delta(); break;
            case ys::MsgType::push_ack: ys::PushAck::decode(f->payload); break;
            case ys::MsgType::heartbeat:
            case ys::MsgType::done: ys::Heartbeat::decode(f->payload); break;
            case ys::MsgType::final_cut: ys::FinalCut::decode(f->payload); break;
            case ys::MsgType::final_ack: ys::FinalAck::decode(f->payload); break;
            case ys::MsgType::error: ys::ErrorMsg::decode(f->payload); break;
            case ys::MsgType::update: {
              const auto u = ys::UpdateMsg::decode(f->payload);
              if (u.numel <= (1u << 16)) {
                std::vector<float> pub(u.numel, 1.0f);
                u.apply_to(pub);
              }
              break;
            }
            case ys::MsgType::holds: ys::Holds::decode(f->payload); break;
            case ys::MsgType::holding: ys::Holding::decode(f->payload); break;
            case ys::MsgType::merged: ys::MergedMsg::decode(f->payload); break;
            case ys::MsgType::leave:
            case ys::MsgType::init_request: break;
          }
        } catch (const ys::WireError&) {
        }
        try {
          ys::Session s(session, 'S', 'L');
          ys::Heartbeat::decode(s.open(std::move(*f)));
        } catch (const ys::WireError&) {
        } catch (const ys::ProtocolError&) {
        }
      }
    }
  } catch (const ys::ProtocolError&) {
  }
  return 0;
}
