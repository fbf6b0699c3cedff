// Little-endian byte writer/reader for protocol payloads and checkpoints. The reader is
// bounds-checked: every read past the end throws WireError, so a truncated or lying
// payload can never read out of bounds.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace yeto::sync {

class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ByteWriter {
 public:
  void u8(std::uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) { put(&v, 2); }
  void u32(std::uint32_t v) { put(&v, 4); }
  void u64(std::uint64_t v) { put(&v, 8); }
  void f32(float v) { put(&v, 4); }
  void bytes(const void* p, std::size_t n) { put(p, n); }
  void str(std::string_view s) {  // u32 length + bytes
    u32(static_cast<std::uint32_t>(s.size()));
    put(s.data(), s.size());
  }
  void floats(std::span<const float> v) { put(v.data(), v.size() * 4); }
  std::string& data() { return buf_; }
  std::string take() { return std::move(buf_); }

 private:
  // The project targets little-endian hosts (x86-64, aarch64); the static_assert keeps it honest.
  void put(const void* p, std::size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string buf_;
};

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

class ByteReader {
 public:
  explicit ByteReader(std::string_view d) : d_(d) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::uint16_t u16() { return get<std::uint16_t>(); }
  std::uint32_t u32() { return get<std::uint32_t>(); }
  std::uint64_t u64() { return get<std::uint64_t>(); }
  float f32() { return get<float>(); }
  std::string_view raw(std::size_t n) { return take(n); }
  std::string str(std::size_t max_len) {
    const std::uint32_t n = u32();
    if (n > max_len) throw WireError("string field longer than " + std::to_string(max_len) + " bytes");
    return std::string(take(n));
  }
  // n floats (exact float32); checks n*4 fits before allocating.
  std::vector<float> floats(std::uint64_t n) {
    if (n > remaining() / 4) throw WireError("float array runs past the end of the message");
    std::vector<float> v(n);
    std::memcpy(v.data(), take(n * 4).data(), n * 4);
    return v;
  }
  std::size_t remaining() const { return d_.size() - pos_; }
  void expect_end() const {
    if (remaining() != 0) throw WireError(std::to_string(remaining()) + " trailing bytes after the message");
  }

 private:
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  std::string_view take(std::size_t n) {
    if (n > remaining()) throw WireError("message is truncated");
    auto s = d_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string_view d_;
  std::size_t pos_ = 0;
};

}  // namespace yeto::sync
