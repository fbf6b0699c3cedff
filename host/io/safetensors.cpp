#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace yeto::io {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct DTypeRow {
  DType dtype;
  const char* name;
  std::size_t size;
};

constexpr DTypeRow kDTypes[] = {
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},       {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::I64, "I64", 8},         {DType::I32, "I32", 4},         {DType::I16, "I16", 2},
    {DType::I8, "I8", 1},           {DType::U8, "U8", 1},           {DType::BOOL, "BOOL", 1},
};

const DTypeRow& row(DType d) {
  for (const auto& r : kDTypes)
    if (r.dtype == d) return r;
  throw Error("unknown dtype value " + std::to_string(static_cast<int>(d)));
}

[[noreturn]] void bad(const std::string& label, const std::string& what) {
  throw Error(label + ": invalid safetensors file: " + what, ExitCode::bad_input);
}

std::string qname(std::string_view s) {
  // Names come from untrusted input: keep messages printable and bounded.
  std::string out = "'";
  std::size_t n = 0;
  for (char c : s) {
    if (++n > 200) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A SAX handler for the header that accepts exactly the safetensors structure. nlohmann's SAX
// parser is iterative, so hostile nesting cannot exhaust the stack, and this handler refuses
// anything deeper than the format allows before it is built.
class HeaderSax {
 public:
  explicit HeaderSax(std::size_t max_rank) : max_rank_(max_rank) {}

  struct RawTensor {
    std::string name;
    std::string dtype;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    std::vector<std::uint64_t> shape;
    std::vector<std::uint64_t> offsets;
  };
  std::vector<RawTensor> tensors;
  std::map<std::string, std::string> metadata;
  bool has_metadata = false;
  std::string error;

  bool null() { return scalar("null"); }
  bool boolean(bool) { return scalar("a boolean"); }
  bool number_integer(json::number_integer_t v) {
    if (v < 0) return fail_in_array("a negative number (" + std::to_string(v) + ")");
    return number(static_cast<std::uint64_t>(v));
  }
  bool number_unsigned(json::number_unsigned_t v) { return number(v); }
  bool number_float(json::number_float_t, const json::string_t& s) {
    return fail_in_array("a non-integer number (" + s + ")");
  }
  bool string(json::string_t& s) {
    if (depth_ == 2 && in_metadata_) {
      metadata[key_] = s;
      return true;
    }
    if (depth_ == 2 && !in_metadata_ && field_ == Field::dtype) {
      cur().dtype = s;
      return true;
    }
    return scalar("a string");
  }
  bool binary(json::binary_t&) { return scalar("binary data"); }

  bool start_object(std::size_t) {
    if (depth_ == 0) {
      depth_ = 1;
      return true;
    }
    if (depth_ == 1) {
      depth_ = 2;
      keys_.clear();
      return true;
    }
    return fail(where() + " holds an object where " + expected());
  }
  bool end_object() {
    if (depth_ == 2 && !in_metadata_) {
      const RawTensor& t = cur();
      if (!t.has_dtype) return fail("tensor " + qname(t.name) + " has no \"dtype\"");
      if (!t.has_shape) return fail("tensor " + qname(t.name) + " has no \"shape\"");
      if (!t.has_offsets) return fail("tensor " + qname(t.name) + " has no \"data_offsets\"");
    }
    in_metadata_ = false;
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 2 && !in_metadata_ && (field_ == Field::shape || field_ == Field::offsets)) {
      depth_ = 3;
      return true;
    }
    return fail(where() + " holds an array where " + expected());
  }
  bool end_array() {
    if (field_ == Field::offsets && cur().offsets.size() != 2)
      return fail("tensor " + qname(cur().name) + ": \"data_offsets\" must hold exactly 2 numbers, not " +
                  std::to_string(cur().offsets.size()));
    depth_ = 2;
    return true;
  }
  bool key(json::string_t& k) {
    if (depth_ == 1) {
      if (!names_.insert(k).second) return fail("duplicate entry " + qname(k));
      if (k == "__metadata__") {
        in_metadata_ = true;
        has_metadata = true;
      } else {
        in_metadata_ = false;
        tensors.push_back({});
        tensors.back().name = k;
        if (k.empty()) return fail("a tensor has an empty name");
      }
      return true;
    }
    // depth 2
    if (!keys_.insert(k).second)
      return fail((in_metadata_ ? std::string("__metadata__") : "tensor " + qname(cur().name)) +
                  ": duplicate key " + qname(k));
    key_ = k;
    if (in_metadata_) return true;
    RawTensor& t = cur();
    if (k == "dtype") {
      field_ = Field::dtype;
      t.has_dtype = true;
    } else if (k == "shape") {
      field_ = Field::shape;
      t.has_shape = true;
    } else if (k == "data_offsets") {
      field_ = Field::offsets;
      t.has_offsets = true;
    } else {
      return fail("tensor " + qname(t.name) + " has an unknown key " + qname(k) +
                  " (expected dtype, shape, data_offsets)");
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    // Keep the first structural error; otherwise report the JSON syntax problem.
    if (error.empty()) {
      std::string what = ex.what();
      const auto p = what.find("syntax error");
      if (p != std::string::npos) what = what.substr(p);
      error = "header is not valid JSON at byte " + std::to_string(position) + ": " + what;
    }
    return false;
  }

 private:
  enum class Field { none, dtype, shape, offsets };

  RawTensor& cur() { return tensors.back(); }
  bool fail(const std::string& what) {
    if (error.empty()) error = what;
    return false;
  }
  std::string where() const {
    if (depth_ == 0) return "the header";
    if (depth_ == 1) return "entry " + qname(key_top());
    if (in_metadata_) return "__metadata__ key " + qname(key_);
    return "tensor " + qname(tensors.empty() ? std::string() : tensors.back().name) + " field " +
           qname(key_);
  }
  std::string key_top() const {
    if (in_metadata_) return "__metadata__";
    return tensors.empty() ? std::string() : tensors.back().name;
  }
  std::string expected() const {
    if (depth_ == 0) return "an object was expected";
    if (depth_ == 1) return "an object was expected";
    if (in_metadata_) return "a string was expected";
    if (field_ == Field::dtype) return "a dtype string was expected";
    return "a number was expected";
  }
  bool scalar(const std::string& what) {
    if (depth_ == 0) return fail("the header is " + what + ", not an object");
    return fail(where() + " holds " + what + " where " + expected());
  }
  bool fail_in_array(const std::string& what) {
    if (depth_ == 3) {
      const std::string f = field_ == Field::shape ? "shape" : "data_offsets";
      return fail("tensor " + qname(cur().name) + ": \"" + f + "\" holds " + what);
    }
    return scalar(what);
  }
  bool number(std::uint64_t v) {
    if (depth_ != 3) return scalar("a number");
    RawTensor& t = cur();
    if (field_ == Field::shape) {
      if (t.shape.size() >= max_rank_)
        return fail("tensor " + qname(t.name) + " has more than " + std::to_string(max_rank_) + " dimensions");
      t.shape.push_back(v);
    } else {
      if (t.offsets.size() >= 2)
        return fail("tensor " + qname(t.name) + ": \"data_offsets\" must hold exactly 2 numbers");
      t.offsets.push_back(v);
    }
    return true;
  }

  std::size_t max_rank_;
  int depth_ = 0;
  bool in_metadata_ = false;
  Field field_ = Field::none;
  std::string key_;
  std::set<std::string> names_;
  std::set<std::string> keys_;
};

std::uint64_t read_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::size_t dtype_size(DType d) { return row(d).size; }
std::string dtype_name(DType d) { return row(d).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& r : kDTypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> all = [] {
    std::vector<DType> v;
    for (const auto& r : kDTypes) v.push_back(r.dtype);
    return v;
  }();
  return all;
}

std::uint64_t TensorInfo::numel() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

ParsedHeader parse_safetensors_header(std::string_view text, std::uint64_t data_size, const std::string& label,
                                      const SafetensorsLimits& limits) {
  if (text.size() > limits.max_header_bytes)
    bad(label, "header of " + std::to_string(text.size()) + " bytes exceeds the limit of " +
                   std::to_string(limits.max_header_bytes));
  if (text.empty() || text.front() != '{') bad(label, "header does not start with '{'");
  HeaderSax sax(limits.max_rank);
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json, true);
  if (!ok || !sax.error.empty()) bad(label, sax.error.empty() ? "header is not valid JSON" : sax.error);

  ParsedHeader out;
  out.metadata = std::move(sax.metadata);
  out.tensors.reserve(sax.tensors.size());
  for (auto& raw : sax.tensors) {
    const std::string who = "tensor " + qname(raw.name);
    const auto dt = parse_dtype(raw.dtype);
    if (!dt) bad(label, who + " has unsupported dtype " + qname(raw.dtype) + " (supported: F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL)");
    TensorInfo t;
    t.name = std::move(raw.name);
    t.dtype = *dt;
    std::uint64_t bytes = dtype_size(*dt);
    bool overflow = false;
    for (auto d : raw.shape) {
      if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) overflow = true;
      t.shape.push_back(static_cast<std::int64_t>(d));
      if (d != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / d) overflow = true;
      else bytes *= d;
    }
    std::string shape_text = shape_str(t.shape);
    if (overflow) bad(label, who + ": shape " + shape_text + " is too large");
    const std::uint64_t begin = raw.offsets[0], end = raw.offsets[1];
    if (begin > end)
      bad(label, who + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] end before they begin");
    if (end > data_size)
      bad(label, who + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] run past the end of the data area (" + std::to_string(data_size) + " bytes; file truncated?)");
    if (end - begin != bytes)
      bad(label, who + ": shape " + shape_text + " x " + dtype_name(*dt) + " is " + std::to_string(bytes) +
                     " bytes but data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] cover " +
                     std::to_string(end - begin));
    t.offset = begin;
    t.nbytes = bytes;
    out.tensors.push_back(std::move(t));
  }
  std::stable_sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  std::uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : out.tensors) {
    if (t.offset < pos)
      bad(label, "tensor " + qname(t.name) + " (bytes " + std::to_string(t.offset) + ".." +
                     std::to_string(t.offset + t.nbytes) + ") overlaps tensor " + qname(prev->name) + " (bytes " +
                     std::to_string(prev->offset) + ".." + std::to_string(prev->offset + prev->nbytes) + ")");
    if (t.offset > pos)
      bad(label, "gap in the data area: bytes " + std::to_string(pos) + ".." + std::to_string(t.offset) +
                     " belong to no tensor (before tensor " + qname(t.name) + ")");
    pos = t.offset + t.nbytes;
    prev = &t;
  }
  if (pos != data_size)
    bad(label, "the data area holds " + std::to_string(data_size) + " bytes but the tensors cover " +
                   std::to_string(pos) + (prev ? " (trailing bytes after tensor " + qname(prev->name) + ")" : std::string()));
  return out;
}

struct SafetensorsFile::State {
  fs::path path;
  const unsigned char* base = nullptr;  // whole file
  std::uint64_t size = 0;
  std::uint64_t header = 0;
  void* map = nullptr;
  int fd = -1;  // kept open for copy_to()
  std::unique_ptr<unsigned char[]> owned;  // from_bytes: exactly sized, so ASan sees overreads
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::size_t, std::less<>> index;
  std::map<std::string, std::string> metadata;

  ~State() {
    if (map) ::munmap(map, size);
    if (fd >= 0) ::close(fd);
  }
  void validate(const std::string& label, const SafetensorsLimits& limits) {
    if (size < 8) bad(label, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
    header = read_le64(base);
    if (header > limits.max_header_bytes)
      bad(label, "header length " + std::to_string(header) + " exceeds the limit of " +
                     std::to_string(limits.max_header_bytes) + " bytes");
    if (header > size - 8)
      bad(label, "header length " + std::to_string(header) + " runs past the end of the file (" +
                     std::to_string(size) + " bytes; truncated?)");
    ParsedHeader h = parse_safetensors_header(
        std::string_view(reinterpret_cast<const char*>(base + 8), header), size - 8 - header, label, limits);
    tensors = std::move(h.tensors);
    metadata = std::move(h.metadata);
    for (std::size_t i = 0; i < tensors.size(); ++i) index.emplace(tensors[i].name, i);
  }
};

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  auto s = std::make_shared<State>();
  s->path = path;
  const std::string label = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw Error("cannot open safetensors file '" + label + "': " + std::strerror(e),
                e == ENOENT ? ExitCode::not_found : ExitCode::bad_input);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("'" + label + "' is not a regular file", ExitCode::bad_input);
  }
  s->size = static_cast<std::uint64_t>(st.st_size);
  if (s->size > 0) {
    // Private and writable: tensors viewing the mapping (mapped_tensor) may be written in place
    // (a merged LoRA, full tuning), which copies the touched pages and never reaches the file.
    void* m = ::mmap(nullptr, s->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw Error("cannot map '" + label + "': " + std::strerror(e), ExitCode::bad_input);
    }
    s->map = m;
    s->base = static_cast<const unsigned char*>(m);
  }
  s->fd = fd;
  s->validate(label, SafetensorsLimits{});
  SafetensorsFile f;
  f.s_ = std::move(s);
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(std::string_view bytes, const std::string& label,
                                            const SafetensorsLimits& limits) {
  auto s = std::make_shared<State>();
  s->path = label;
  s->owned.reset(new unsigned char[bytes.size() ? bytes.size() : 1]);
  if (!bytes.empty()) std::memcpy(s->owned.get(), bytes.data(), bytes.size());
  s->base = s->owned.get();
  s->size = bytes.size();
  s->validate(label, limits);
  SafetensorsFile f;
  f.s_ = std::move(s);
  return f;
}

const std::vector<TensorInfo>& SafetensorsFile::tensors() const { return s_->tensors; }

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = s_->index.find(name);
  return it == s_->index.end() ? nullptr : &s_->tensors[it->second];
}

const std::byte* SafetensorsFile::data(const TensorInfo& t) const {
  if (t.offset + t.nbytes > data_size())
    throw Error(s_->path.string() + ": tensor '" + t.name + "' does not belong to this file", ExitCode::bad_input);
  return reinterpret_cast<const std::byte*>(s_->base + 8 + s_->header + t.offset);
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& t) const {
  return {data(t), static_cast<std::size_t>(t.nbytes)};
}

void SafetensorsFile::copy_to(const TensorInfo& t, void* dst) const {
  const std::byte* src = data(t);  // bounds check
  if (s_->fd < 0) {
    if (t.nbytes) std::memcpy(dst, src, t.nbytes);
    return;
  }
  auto* out = static_cast<char*>(dst);
  std::uint64_t done = 0;
  const std::uint64_t start = 8 + s_->header + t.offset;
  while (done < t.nbytes) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(t.nbytes - done, 1u << 30));
    const ssize_t n = ::pread(s_->fd, out + done, chunk, static_cast<off_t>(start + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(s_->path.string() + ": cannot read tensor '" + t.name + "': " +
                      (n < 0 ? std::strerror(errno) : "file shrank while open"),
                  ExitCode::bad_input);
    done += static_cast<std::uint64_t>(n);
  }
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return s_->metadata; }
const fs::path& SafetensorsFile::path() const { return s_->path; }
std::uint64_t SafetensorsFile::file_size() const { return s_->size; }
std::uint64_t SafetensorsFile::header_size() const { return s_->header; }
std::uint64_t SafetensorsFile::data_size() const { return s_->size - 8 - s_->header; }

void SafetensorsFile::release(const TensorInfo& t) const {
  if (!s_->map || t.nbytes == 0) return;
  static const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t begin = 8 + s_->header + t.offset;
  const std::uint64_t first = (begin + page - 1) / page * page;  // only whole pages of this tensor
  const std::uint64_t last = (begin + t.nbytes) / page * page;
  if (last > first)
    ::madvise(static_cast<char*>(s_->map) + first, last - first, MADV_DONTNEED);
}

namespace {

std::string build_header(const std::vector<SafetensorsEntry>& entries,
                         const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& e : entries) {
    if (e.name.empty()) throw Error("cannot write a tensor with an empty name", ExitCode::bad_input);
    if (e.name == "__metadata__") throw Error("'__metadata__' is reserved and cannot name a tensor", ExitCode::bad_input);
    if (h.contains(e.name)) throw Error("duplicate tensor name '" + e.name + "'", ExitCode::bad_input);
    std::uint64_t n = dtype_size(e.dtype);
    for (auto d : e.shape) {
      if (d < 0) throw Error("tensor '" + e.name + "' has a negative dimension", ExitCode::bad_input);
      n *= static_cast<std::uint64_t>(d);
    }
    if (n != e.bytes.size())
      throw Error("tensor '" + e.name + "': shape " + shape_str(e.shape) + " x " + dtype_name(e.dtype) + " is " +
                      std::to_string(n) + " bytes but " + std::to_string(e.bytes.size()) + " were given",
                  ExitCode::bad_input);
    h[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::string length_prefix(std::uint64_t n) {
  std::string p(8, '\0');
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return p;
}

}  // namespace

std::string serialize_safetensors(const std::vector<SafetensorsEntry>& entries,
                                  const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(entries, metadata);
  std::string out = length_prefix(header.size()) + header;
  for (const auto& e : entries) out.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  return out;
}

void write_safetensors(const fs::path& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(entries, metadata);
  AtomicFile f(path);
  f.write(length_prefix(header.size()));
  f.write(header);
  for (const auto& e : entries)
    if (!e.bytes.empty()) f.write(e.bytes.data(), e.bytes.size());
  f.commit();
}

}  // namespace yeto::io
