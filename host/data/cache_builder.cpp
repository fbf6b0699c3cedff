#include "data/cache_builder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/sha256.hpp"
#include "data/tensor_ref.hpp"
#include "io/safetensors.hpp"

namespace yeto::data {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Appends one line and fsyncs it: an index line is durable before the next shard starts.
void append_line(const fs::path& file, const std::string& line) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot append to " + file.string(), ExitCode::failure);
  const std::string data = line + "\n";
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n <= 0) {
      ::close(fd);
      throw Error("cannot append to " + file.string(), ExitCode::failure);
    }
    off += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
}

std::int64_t mtime_ns(const fs::path& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  if (ec) return 0;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::vector<fs::path> source_files(const Row& row) {
  std::vector<fs::path> files;
  if (!row.media_path.empty() && row.media != MediaKind::frames) files.push_back(row.media_path);
  for (const auto& f : row.frame_paths) files.push_back(f);
  auto add_ref = [&](const std::optional<TensorRef>& t) {
    if (t && !t->is_inline) files.push_back(t->path);
  };
  add_ref(row.latents);
  add_ref(row.prompt_embeds);
  add_ref(row.attention_mask);
  add_ref(row.pooled_embeds);
  for (const auto& [name, t] : row.tensors)
    if (!t.is_inline) files.push_back(t.path);
  return files;
}

int next_shard_number(const fs::path& dir) {
  int n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir / "shards", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (f.rfind("shard-", 0) == 0) n = std::max(n, std::atoi(f.c_str() + 6) + 1);
  }
  return n;
}

}  // namespace

FileHasher::FileHasher(fs::path store) : store_(std::move(store)) {
  std::error_code ec;
  if (!fs::is_regular_file(store_, ec)) return;
  try {
    const json j = json::parse(read_file(store_));
    for (const auto& [path, e] : j.items())
      entries_[path] = {e.at("size").get<std::uintmax_t>(), e.at("mtime_ns").get<std::int64_t>(), e.at("sha256").get<std::string>()};
  } catch (const std::exception&) {
    entries_.clear();  // a damaged hash store only costs re-hashing
  }
}

std::string FileHasher::hash(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) throw Error(file.string() + ": cannot read (" + ec.message() + ")", ExitCode::bad_input);
  const std::int64_t mt = mtime_ns(file);
  const std::string key = fs::absolute(file).lexically_normal().string();
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.size == size && it->second.mtime_ns == mt) return it->second.sha256;
  Entry e{size, mt, sha256_file(file)};
  ++hashed_;
  entries_[key] = e;
  return e.sha256;
}

void FileHasher::save() const {
  json j = json::object();
  for (const auto& [path, e] : entries_) j[path] = {{"size", e.size}, {"mtime_ns", e.mtime_ns}, {"sha256", e.sha256}};
  atomic_write(store_, j.dump(1));
}

std::string row_key(const Row& row) {
  std::string id = std::string(media_kind_name(row.media)) + "\n" + row.media_ref + "\n";
  if (!row.inline_image.empty()) id += sha256_hex(row.inline_image) + "\n";
  id += row.prompt ? "p:" + *row.prompt : std::string("e:") + (row.prompt_embeds ? row.prompt_embeds->describe() : "");
  return sha256_hex(id).substr(0, 24);
}

std::string settings_fingerprint(const CacheProfile& p) {
  json j = contract_to_json(p, 0);
  j.erase("rows");
  j.erase("tensors");  // outputs, not inputs
  j["fingerprint_scheme"] = 1;
  return sha256_hex(j.dump());
}

std::string row_fingerprint(const Row& row, const std::string& settings, FileHasher& hasher) {
  json j;
  j["settings"] = settings;
  j["key"] = row_key(row);
  json files = json::array();
  for (const auto& f : source_files(row)) files.push_back(hasher.hash(f));
  j["files"] = files;
  if (!row.inline_image.empty()) j["inline"] = sha256_hex(row.inline_image);
  if (row.prompt) j["prompt"] = *row.prompt;
  // Per-row shape metadata changes the preprocessing of this row alone.
  if (row.frames) j["frames"] = *row.frames;
  if (row.height) j["height"] = *row.height;
  if (row.width) j["width"] = *row.width;
  if (row.fps) j["fps"] = *row.fps;
  return sha256_hex(j.dump());
}

std::map<std::string, IndexEntry> read_cache_index(const fs::path& dir) {
  std::map<std::string, IndexEntry> out;
  std::ifstream in(dir / "index.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    try {
      const json j = json::parse(line);
      IndexEntry e;
      e.key = j.at("key").get<std::string>();
      e.fingerprint = j.at("fingerprint").get<std::string>();
      e.shard = j.at("shard").get<std::string>();
      e.row = j.value("row", std::int64_t{0});
      if (j.contains("prompt") && j["prompt"].is_string()) {
        e.prompt = j["prompt"].get<std::string>();
        e.has_prompt = true;
      }
      for (const auto& [name, spec] : j.at("tensors").items())
        e.tensors[name] = {spec.at("dtype").get<std::string>(), spec.at("shape").get<std::vector<std::int64_t>>()};
      out[e.key] = std::move(e);
    } catch (const std::exception&) {
      continue;  // torn or foreign line
    }
  }
  return out;
}

CacheRunStats build_cache(const Manifest& manifest, CacheEncoder& encoder, const CacheRunOptions& o,
                          const std::function<void(const CacheProgress&)>& progress) {
  const fs::path dir = o.out_dir;
  fs::create_directories(dir / "shards");
  CacheProfile profile = preprocessing_profile(o.data);
  profile.model_id = encoder.model_id();
  profile.model_commit = encoder.model_commit();
  profile.components = encoder.component_hashes();
  const std::string settings = settings_fingerprint(profile);

  FileHasher hasher(dir / "file_hashes.json");
  auto index = read_cache_index(dir);
  CacheRunStats stats;

  // Decide per row: valid entry with the same fingerprint and an existing shard -> skip.
  struct Todo {
    std::size_t row;
    std::string key, fingerprint;
  };
  std::vector<Todo> todo;
  std::map<std::string, std::string> wanted;  // key -> current fingerprint
  for (std::size_t i = 0; i < manifest.rows.size(); ++i) {
    const Row& row = manifest.rows[i];
    std::string key, fp;
    try {
      key = row_key(row);
      fp = row_fingerprint(row, settings, hasher);
    } catch (const Error& e) {
      if (o.data.on_bad_row == BadRowPolicy::error) throw Error(row_message(row, e.what()), e.code());
      stats.errors.push_back(row_message(row, e.what()));
      ++stats.failed;
      continue;
    }
    if (!wanted.emplace(key, fp).second) continue;  // duplicate row (same media and prompt)
    auto it = index.find(key);
    std::error_code ec;
    if (it != index.end() && it->second.fingerprint == fp && fs::is_regular_file(dir / it->second.shard, ec)) {
      ++stats.skipped;
      continue;
    }
    todo.push_back({i, key, fp});
  }
  for (const auto& e : manifest.errors) {
    if (o.data.on_bad_row == BadRowPolicy::error) throw Error(e.str(), ExitCode::bad_input);
    stats.errors.push_back(e.str());
    ++stats.failed;
  }

  if (o.max_rows > 0 && todo.size() > static_cast<std::size_t>(o.max_rows)) {
    stats.remaining = static_cast<std::int64_t>(todo.size()) - o.max_rows;
    todo.resize(static_cast<std::size_t>(o.max_rows));
  }
  if (progress) {
    CacheProgress p;
    p.starting = true;
    p.total = static_cast<std::int64_t>(todo.size());
    p.skipped = stats.skipped;
    progress(p);
  }

  const auto start = std::chrono::steady_clock::now();
  int shard_no = next_shard_number(dir);
  const auto per_shard = static_cast<std::size_t>(std::max<std::int64_t>(1, o.rows_per_shard));
  const auto per_batch = static_cast<std::size_t>(std::max<std::int64_t>(1, o.batch_size));
  for (std::size_t s = 0; s < todo.size(); s += per_shard) {
    const std::size_t s_end = std::min(todo.size(), s + per_shard);
    std::vector<NamedTensor> shard_tensors;
    std::vector<json> lines;
    char name[32];
    std::snprintf(name, sizeof(name), "shard-%05d.safetensors", shard_no);
    const std::string shard_rel = std::string("shards/") + name;
    for (std::size_t b = s; b < s_end; b += per_batch) {
      const std::size_t b_end = std::min(s_end, b + per_batch);
      std::vector<Sample> samples;
      std::vector<const Todo*> owners;
      for (std::size_t k = b; k < b_end; ++k) {
        const Row& row = manifest.rows[todo[k].row];
        try {
          samples.push_back(decode_row(row, todo[k].row, o.data));
          owners.push_back(&todo[k]);
        } catch (const Error& e) {
          if (o.data.on_bad_row == BadRowPolicy::error) throw;
          stats.errors.push_back(e.what());
          ++stats.failed;
        }
      }
      if (samples.empty()) continue;
      auto encoded = encoder.encode(samples);
      if (encoded.size() != samples.size())
        throw Error("cache encoder returned " + std::to_string(encoded.size()) + " results for " + std::to_string(samples.size()) + " samples",
                    ExitCode::failure);
      for (std::size_t k = 0; k < samples.size(); ++k) {
        const Todo& t = *owners[k];
        const Row& row = manifest.rows[t.row];
        json line = {{"key", t.key}, {"fingerprint", t.fingerprint}, {"shard", shard_rel}, {"row", row.number}};
        if (row.prompt) line["prompt"] = *row.prompt;
        json tensors = json::object();
        for (auto& tensor : encoded[k]) {
          tensors[tensor.name] = {{"dtype", tensor.dtype}, {"shape", tensor.shape}};
          profile.tensors[tensor.name] = {tensor.dtype, tensor.shape};
          tensor.name = t.key + "/" + tensor.name;
          shard_tensors.push_back(std::move(tensor));
        }
        line["tensors"] = tensors;
        lines.push_back(std::move(line));
        stats.computed_keys.push_back(t.key);
      }
    }
    if (!lines.empty()) {
      std::vector<io::SafetensorsEntry> entries;
      for (const auto& t : shard_tensors) {
        const auto dt = io::parse_dtype(safetensors_dtype_name(t.dtype));
        if (!dt) throw Error("cache encoder produced tensor '" + t.name + "' of unsupported dtype " + t.dtype, ExitCode::failure);
        entries.push_back({t.name, *dt, t.shape, std::as_bytes(std::span<const char>(t.bytes.data(), t.bytes.size()))});
      }
      io::write_safetensors(dir / shard_rel, entries, {{"format", kCacheFormat}});
      for (const auto& l : lines) append_line(dir / "index.jsonl", l.dump());
      ++shard_no;
      stats.computed += static_cast<std::int64_t>(lines.size());
    }
    hasher.save();
    if (progress) {
      CacheProgress p;
      p.done = stats.computed;
      p.total = static_cast<std::int64_t>(todo.size());
      p.skipped = stats.skipped;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      p.rows_per_second = secs > 0 ? static_cast<double>(s_end) / secs : 0.0;
      p.eta_seconds = p.rows_per_second > 0 ? static_cast<double>(todo.size() - s_end) / p.rows_per_second : 0.0;
      progress(p);
    }
  }
  hasher.save();

  // The cache manifest and contract describe every row that is now valid.
  index = read_cache_index(dir);
  std::string manifest_text;
  std::int64_t rows = 0;
  for (const auto& [key, fingerprint] : wanted) {
    auto it = index.find(key);
    if (it == index.end() || it->second.fingerprint != fingerprint) continue;  // not encoded (yet) for this content
    const IndexEntry& e = it->second;
    json r = json::object();
    for (const auto& [tname, spec] : e.tensors) {
      profile.tensors.emplace(tname, spec);
      r[tname] = e.shard + "#" + e.key + "/" + tname;
    }
    if (e.has_prompt) r["prompt"] = e.prompt;
    manifest_text += r.dump() + "\n";
    ++rows;
  }
  stats.rows = rows;
  atomic_write(dir / "manifest.jsonl", manifest_text);
  atomic_write(dir / kCacheContractFile, contract_to_json(profile, rows).dump(2) + "\n");
  return stats;
}

}  // namespace yeto::data
