// A connection's queue of outgoing frames: where a small fragment's frame sent after a merge goes.
// docs/DESIGN.md, "Threads".
#pragma once

#include <cstddef>
#include <cstdint>

#include "sync/protocol.hpp"

namespace yeto::sync {

// Not a broadcast's frame of one fragment (a control frame, a raw frame).
inline constexpr std::uint32_t kNoFragment = UINT32_MAX;

// The index at which a frame of fragment p (an `update` or a `fragment` under bulk_bytes) enters
// queue q: ahead of the bulk `update` and `fragment` frames of other fragments waiting at the
// back, so a small fragment's new state does not wait for a large one's to be sealed and written;
// never ahead of the front (the writer may be sealing or writing it), of a frame of fragment p
// itself (a learner applies an update only on top of its base), or of any other frame (welcome,
// holding, final cut: their order is the protocol's). Each element has `type` and `fragment`;
// bytes(element) is its size.
template <class Queue, class Bytes>
std::size_t overtake_position(const Queue& q, std::uint32_t p, std::size_t bulk_bytes, Bytes&& bytes) {
  std::size_t pos = q.size();
  while (pos > 1) {
    const auto& f = q[pos - 1];
    if (f.type != MsgType::update && f.type != MsgType::fragment) break;
    if (f.fragment == p || f.fragment == kNoFragment || bytes(f) < bulk_bytes) break;
    --pos;
  }
  return pos;
}

}  // namespace yeto::sync
