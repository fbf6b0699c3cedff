// A TCP port on 127.0.0.1 that nothing listens on right now, for tests that start a syncer or
// an island rendezvous of their own.
#pragma once

#include <cstdint>

namespace yeto::test {

// Binds port 0 on the loopback address, reads the port the kernel chose and closes the socket.
// Throws std::runtime_error (with errno's text) when no socket can be bound.
std::uint16_t unused_loopback_port();

}  // namespace yeto::test
