#include "io/provenance.hpp"

#include <algorithm>
#include <mutex>
#include <tuple>

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/sha256.hpp"
#include "core/version.hpp"

namespace yeto::io {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_weight_file(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".safetensors" || e == ".bin" || e == ".pt" || e == ".pth" || e == ".ckpt" || e == ".gguf";
}

}  // namespace

std::string cached_sha256(const fs::path& path) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, std::uint64_t, std::int64_t>, std::string> memo;
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  const fs::path p = ec ? path : real;
  const auto size = fs::file_size(p, ec);
  const auto mtime = fs::last_write_time(p, ec).time_since_epoch().count();
  const auto key = std::make_tuple(p.string(), static_cast<std::uint64_t>(size), static_cast<std::int64_t>(mtime));
  {
    std::lock_guard lock(mu);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
  }
  std::string h = sha256_file(p);
  std::lock_guard lock(mu);
  memo[key] = h;
  return h;
}

std::vector<fs::path> weight_files_under(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && is_weight_file(it->path())) out.push_back(fs::relative(it->path(), dir, ec));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Provenance::Provenance() {
  const BuildInfo& b = build_info();
  host_ = {{"version", b.version},       {"git_commit", b.git_commit}, {"build_type", b.build_type},
           {"compiler", b.compiler},     {"torch_version", b.torch_version}, {"cuda", b.cuda}};
  created_ = utc_timestamp();
}

void Provenance::set_config(const config::Config& cfg) { config_hash_ = cfg.hash(); }

ProvenanceSource& Provenance::add_source(const std::string& role, const std::string& spec, const ResolvedRepo& repo,
                                         const std::vector<fs::path>& files) {
  ProvenanceSource s;
  s.role = role;
  s.spec = spec;
  s.id = repo.id;
  s.revision = repo.revision;
  s.commit = repo.commit;
  s.path = repo.path.string();
  const std::vector<fs::path> list = files.empty() ? weight_files_under(repo.path) : files;
  for (const auto& rel : list) {
    const fs::path full = rel.is_absolute() ? rel : repo.path / rel;
    std::error_code ec;
    const auto bytes = fs::file_size(full, ec);
    if (ec) throw Error("provenance: cannot read '" + full.string() + "': " + ec.message(), ExitCode::not_found);
    s.files.push_back({rel.generic_string(), cached_sha256(full), static_cast<std::uint64_t>(bytes)});
  }
  sources_.push_back(std::move(s));
  return sources_.back();
}

void Provenance::add_file(const std::string& role, const fs::path& file) {
  ResolvedRepo r;
  r.local = true;
  r.path = file.parent_path();
  add_source(role, file.string(), r, {file.filename()});
}

void Provenance::add_plugin(const std::string& name, const std::string& version, const fs::path& so_path) {
  plugins_.push_back({name, version, so_path.string(), cached_sha256(so_path)});
}

json Provenance::to_json() const {
  json sources = json::array();
  for (const auto& s : sources_) {
    json files = json::array();
    for (const auto& f : s.files) files.push_back({{"path", f.path}, {"sha256", f.sha256}, {"bytes", f.bytes}});
    sources.push_back({{"role", s.role}, {"spec", s.spec}, {"id", s.id}, {"revision", s.revision},
                       {"commit", s.commit}, {"path", s.path}, {"files", files}});
  }
  json plugins = json::array();
  for (const auto& p : plugins_)
    plugins.push_back({{"name", p.name}, {"version", p.version}, {"path", p.path}, {"sha256", p.sha256}});
  return {{"format", "yeto-provenance"}, {"format_version", 1}, {"created", created_}, {"host", host_},
          {"config_sha256", config_hash_}, {"sources", sources}, {"plugins", plugins}, {"extra", extra_}};
}

Provenance Provenance::from_json(const json& j) {
  try {
    if (j.at("format") != "yeto-provenance") throw Error("not a yeto provenance record", ExitCode::bad_input);
    Provenance p;
    p.created_ = j.at("created");
    p.host_ = j.at("host");
    p.config_hash_ = j.at("config_sha256");
    for (const auto& s : j.at("sources")) {
      ProvenanceSource src{s.at("role"), s.at("spec"), s.at("id"), s.at("revision"), s.at("commit"), s.at("path"), {}};
      for (const auto& f : s.at("files")) src.files.push_back({f.at("path"), f.at("sha256"), f.at("bytes")});
      p.sources_.push_back(std::move(src));
    }
    for (const auto& x : j.at("plugins")) p.plugins_.push_back({x.at("name"), x.at("version"), x.at("path"), x.at("sha256")});
    if (j.contains("extra")) p.extra_ = j["extra"];
    return p;
  } catch (const json::exception& e) {
    throw Error(std::string("invalid provenance record: ") + e.what(), ExitCode::bad_input);
  }
}

void Provenance::write(const fs::path& path) const { atomic_write(path, to_json().dump(2) + "\n"); }

Provenance Provenance::read(const fs::path& path) {
  try {
    return from_json(json::parse(read_file(path)));
  } catch (const json::parse_error& e) {
    throw Error(path.string() + ": invalid provenance record: " + e.what(), ExitCode::bad_input);
  } catch (const Error& e) {
    throw Error(path.string() + ": " + e.what(), e.code());
  }
}

}  // namespace yeto::io
