#include "artifacts/shards.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace yeto::artifacts {
namespace {

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::uint64_t parse_size(const std::string& text, const std::string& what) {
  const std::string s = upper(text);
  auto refuse = [&](const std::string& why) -> UsageError {
    return UsageError(what + " '" + text + "': " + why +
                      "; give bytes or a number with a unit, e.g. 2GB, 500MB, 10KB, 4GiB (KB/MB/GB/TB are powers "
                      "of 1000, KiB/MiB/GiB/TiB powers of 1024)");
  };
  struct Unit {
    const char* suffix;
    double factor;
  };
  static const Unit units[] = {{"TIB", 1099511627776.0}, {"GIB", 1073741824.0}, {"MIB", 1048576.0}, {"KIB", 1024.0},
                               {"TB", 1e12},             {"GB", 1e9},           {"MB", 1e6},        {"KB", 1e3},
                               {"B", 1.0}};
  std::string number = s;
  double factor = 1.0;
  for (const auto& u : units) {
    const std::string suf = u.suffix;
    if (s.size() > suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0) {
      number = s.substr(0, s.size() - suf.size());
      factor = u.factor;
      break;
    }
  }
  while (!number.empty() && number.back() == ' ') number.pop_back();
  if (number.empty()) throw refuse("no number");
  bool dot = false;
  for (char c : number) {
    if (c == '.' && !dot) {
      dot = true;
    } else if (!std::isdigit(static_cast<unsigned char>(c))) {
      throw refuse("not a size");
    }
  }
  const double value = std::stod(number) * factor;
  if (!(value >= 1.0)) throw refuse("must be at least one byte");
  if (value >= 1.8e19) throw refuse("too large");
  return static_cast<std::uint64_t>(std::llround(value));
}

std::vector<std::vector<std::size_t>> plan_shards(const std::vector<std::uint64_t>& sizes, std::uint64_t cap) {
  std::vector<std::vector<std::size_t>> shards;
  std::uint64_t current = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > cap) {
      shards.push_back({i});
      current = std::numeric_limits<std::uint64_t>::max();  // nothing joins an oversized shard
      continue;
    }
    if (shards.empty() || current > cap || current + sizes[i] > cap) {
      shards.push_back({});
      current = 0;
    }
    shards.back().push_back(i);
    current += sizes[i];
  }
  return shards;
}

std::string shard_file_name(const std::string& stem, std::size_t index, std::size_t count) {
  if (count == 1) return stem + ".safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", index + 1, count);
  return stem + buf;
}

std::uint64_t TensorHeader::nbytes() const {
  std::uint64_t n = io::dtype_size(dtype);
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::filesystem::path& path, std::vector<TensorHeader> tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : tensors_(std::move(tensors)) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::set<std::string> seen;
  for (const auto& t : tensors_) {
    if (t.name == "__metadata__" || !seen.insert(t.name).second) {
      throw Error(path.string() + ": tensor name '" + t.name + "' is reserved or repeated", ExitCode::bad_input);
    }
    const std::uint64_t n = t.nbytes();
    h[t.name] = {{"dtype", io::dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  char prefix[8];
  std::uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  file_ = std::make_unique<AtomicFile>(path);
  file_->write(prefix, 8);
  file_->write(header);
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() = default;

void SafetensorsStreamWriter::write(const std::string& name, const void* data, std::size_t size) {
  if (next_ >= tensors_.size() || tensors_[next_].name != name) {
    throw Error(file_->target().string() + ": tensor '" + name + "' written out of order (expected '" +
                    (next_ < tensors_.size() ? tensors_[next_].name : std::string("none")) + "')",
                ExitCode::failure);
  }
  if (size != tensors_[next_].nbytes()) {
    throw Error(file_->target().string() + ": tensor '" + name + "' has " + std::to_string(size) + " bytes, its header says " +
                    std::to_string(tensors_[next_].nbytes()),
                ExitCode::failure);
  }
  if (size) file_->write(data, size);
  ++next_;
}

void SafetensorsStreamWriter::commit() {
  if (next_ != tensors_.size()) {
    throw Error(file_->target().string() + ": only " + std::to_string(next_) + " of " + std::to_string(tensors_.size()) +
                    " tensors were written",
                ExitCode::failure);
  }
  file_->commit();
}

nlohmann::json shard_index(std::uint64_t total_size, const std::map<std::string, std::string>& weight_map) {
  return {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
}

}  // namespace yeto::artifacts
