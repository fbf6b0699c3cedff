#include "core/tensorboard.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.hpp"

namespace yeto {
namespace {

// Protocol-buffer wire encoding of the few fields an Event with a scalar summary needs.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire_type));
}
void put_fixed64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_fixed32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}
void put_double(std::string& out, int field, double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_tag(out, field, 1);
  put_fixed64(out, bits);
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event(double wall_time, std::int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  put_tag(e, 2, 0);
  put_varint(e, static_cast<std::uint64_t>(step));
  return e;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create TensorBoard directory '" + dir.string() + "': " + ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const auto secs = static_cast<long long>(now_seconds());
  // The pid keeps two writers started within the same second apart.
  path_ = dir / ("events.out.tfevents." + std::to_string(secs) + "." + host + "." + std::to_string(::getpid()));
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) throw Error("cannot create TensorBoard event file '" + path_.string() + "': " + std::strerror(errno));
  std::string first = event(now_seconds(), 0);
  put_bytes(first, 3, "brain.Event:2");
  write_record(first);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_record(const std::string& payload) {
  std::string header;
  put_fixed64(header, payload.size());
  std::string rec = header;
  put_fixed32(rec, masked_crc32c(header));
  rec += payload;
  put_fixed32(rec, masked_crc32c(payload));
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size() || std::fflush(file_) != 0)
    throw Error("cannot append to TensorBoard event file '" + path_.string() + "': " + std::strerror(errno));
}

void TensorBoardWriter::scalar(const std::string& tag, double value, std::int64_t step, double wall_time) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string v;
  put_bytes(v, 1, tag);
  const float f = static_cast<float>(value);
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  put_tag(v, 2, 5);
  put_fixed32(v, bits);
  write_summary_value(v, step, wall_time);
}

void TensorBoardWriter::write_summary_value(const std::string& value, std::int64_t step, double wall_time) {
  // Event { ...; Summary summary = 5; }  Summary { repeated Value value = 1; }
  std::string summary;
  put_bytes(summary, 1, value);
  std::string e = event(wall_time >= 0 ? wall_time : now_seconds(), step);
  put_bytes(e, 5, summary);
  std::lock_guard<std::mutex> lock(mutex_);
  write_record(e);
}

void TensorBoardWriter::image(const std::string& tag, const std::string& png, int height, int width, int channels,
                              std::int64_t step, double wall_time) {
  // Summary.Image { int32 height = 1; int32 width = 2; int32 colorspace = 3; bytes encoded_image_string = 4; }
  // Value { string tag = 1; Image image = 4; }
  std::string img;
  put_tag(img, 1, 0);
  put_varint(img, static_cast<std::uint64_t>(height));
  put_tag(img, 2, 0);
  put_varint(img, static_cast<std::uint64_t>(width));
  put_tag(img, 3, 0);
  put_varint(img, static_cast<std::uint64_t>(channels));
  put_bytes(img, 4, png);
  std::string v;
  put_bytes(v, 1, tag);
  put_bytes(v, 4, img);
  write_summary_value(v, step, wall_time);
}

void TensorBoardWriter::session_start(std::int64_t step, const std::string& message) {
  // SessionLog { SessionStatus status = 1 (START = 1); string checkpoint_path = 2; string msg = 3; }
  std::string log;
  put_tag(log, 1, 0);
  put_varint(log, 1);
  put_bytes(log, 3, message);
  std::string e = event(now_seconds(), step);
  put_bytes(e, 7, log);  // Event.session_log
  std::lock_guard<std::mutex> lock(mutex_);
  write_record(e);
}

}  // namespace yeto
