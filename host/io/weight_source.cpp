#include "io/weight_source.hpp"

#include <algorithm>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"

namespace yeto::io {
namespace fs = std::filesystem;

namespace {

const char* const kStems[] = {"diffusion_pytorch_model", "model"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> weight_file_candidates(const std::string& variant) {
  std::vector<std::string> out;
  for (const char* stem : kStems) {
    const std::string s = stem;
    if (variant.empty()) {
      out.push_back(s + ".safetensors.index.json");
      out.push_back(s + ".safetensors");
    } else {
      // Diffusers puts the variant before the last extension of the index name; some
      // repositories put it before ".safetensors" instead. Accept both.
      out.push_back(s + ".safetensors.index." + variant + ".json");
      out.push_back(s + "." + variant + ".safetensors.index.json");
      out.push_back(s + "." + variant + ".safetensors");
    }
  }
  return out;
}

struct WeightSource::State {
  fs::path root;
  std::string variant;
  fs::path index;
  std::vector<fs::path> files;
  std::vector<std::string> names;
  std::map<std::string, fs::path> where;  // name -> file (from the index, or from the single file)
  mutable std::mutex mu;
  mutable std::map<fs::path, SafetensorsFile> open;

  SafetensorsFile file(const fs::path& p) const {
    std::lock_guard lock(mu);
    auto it = open.find(p);
    if (it != open.end()) return it->second;
    SafetensorsFile f = SafetensorsFile::open(p);
    open.emplace(p, f);
    return f;
  }
};

namespace {

void load_index(WeightSource::State& s, const fs::path& index) {
  const std::string label = index.string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(index));
  } catch (const nlohmann::json::exception& e) {
    throw Error(label + ": invalid weight index: " + e.what(), ExitCode::bad_input);
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(label + ": invalid weight index: no \"weight_map\" object", ExitCode::bad_input);
  std::set<fs::path> files;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      throw Error(label + ": weight_map entry '" + name + "' is not a file name", ExitCode::bad_input);
    const std::string f = file.get<std::string>();
    // The index is untrusted: shard names are plain file names beside it, never paths.
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
      throw Error(label + ": weight_map entry '" + name + "' names '" + f +
                      "', which is not a plain file name in the same folder",
                  ExitCode::bad_input);
    const fs::path p = index.parent_path() / f;
    if (!files.count(p) && !fs::is_regular_file(p))
      throw Error(label + ": shard '" + f + "' (holding tensor '" + name + "') does not exist in " +
                      index.parent_path().string(),
                  ExitCode::not_found);
    files.insert(p);
    s.where[name] = p;
  }
  s.index = index;
  s.files.assign(files.begin(), files.end());
}

}  // namespace

WeightSource WeightSource::open(const fs::path& where, const std::string& variant) {
  auto s = std::make_shared<State>();
  s->variant = variant;
  std::error_code ec;
  if (fs::is_regular_file(where, ec)) {
    s->root = where.parent_path();
    const std::string name = where.filename().string();
    if (ends_with(name, ".json")) {
      load_index(*s, where);
    } else {
      s->files = {where};
    }
  } else if (fs::is_directory(where, ec)) {
    s->root = where;
    std::vector<std::string> tried;
    for (const auto& c : weight_file_candidates(variant)) {
      tried.push_back(c);
      const fs::path p = where / c;
      if (!fs::is_regular_file(p, ec)) continue;
      if (ends_with(c, ".json")) load_index(*s, p);
      else s->files = {p};
      break;
    }
    if (s->files.empty()) {
      // Any other single safetensors file (e.g. pytorch_lora_weights.safetensors).
      std::vector<fs::path> found;
      for (const auto& e : fs::directory_iterator(where, ec))
        if (e.is_regular_file() && ends_with(e.path().filename().string(), ".safetensors")) found.push_back(e.path());
      std::sort(found.begin(), found.end());
      if (variant.empty() && found.size() == 1) {
        s->files = found;
      } else {
        std::string msg = "no " + (variant.empty() ? std::string() : variant + " variant ") +
                          "safetensors weights in " + where.string() + " (looked for " + join(tried, ", ") + ")";
        if (!found.empty()) {
          std::vector<std::string> names;
          for (const auto& f : found) names.push_back(f.filename().string());
          msg += "; it holds " + join(names, ", ");
        }
        throw Error(msg, ExitCode::not_found);
      }
    }
  } else {
    throw Error("weights not found: " + where.string() + " does not exist", ExitCode::not_found);
  }
  if (s->index.empty()) {
    const SafetensorsFile f = s->file(s->files.front());
    for (const auto& t : f.tensors()) s->where[t.name] = s->files.front();
  }
  for (const auto& [name, file] : s->where) s->names.push_back(name);
  WeightSource w;
  w.s_ = std::move(s);
  return w;
}

const fs::path& WeightSource::root() const { return s_->root; }
const std::string& WeightSource::variant() const { return s_->variant; }
const std::vector<fs::path>& WeightSource::files() const { return s_->files; }
fs::path WeightSource::index_file() const { return s_->index; }
const std::vector<std::string>& WeightSource::names() const { return s_->names; }
bool WeightSource::has(const std::string& name) const { return s_->where.count(name) > 0; }

WeightSource::Located WeightSource::locate(const std::string& name) const {
  const auto it = s_->where.find(name);
  if (it == s_->where.end())
    throw Error("tensor '" + name + "' is not in the weights of " + s_->root.string() +
                    did_you_mean(name, s_->names),
                ExitCode::not_found);
  Located l{s_->file(it->second), nullptr};
  l.info = l.file.find(name);
  if (!l.info)
    throw Error(s_->index.string() + ": the index puts tensor '" + name + "' in " + it->second.filename().string() +
                    ", which does not hold it",
                ExitCode::bad_input);
  return l;
}

void WeightSource::validate() const {
  std::map<std::string, fs::path> seen;
  for (const auto& f : s_->files) {
    const SafetensorsFile sf = s_->file(f);
    for (const auto& t : sf.tensors()) {
      const auto [it, fresh] = seen.emplace(t.name, f);
      if (!fresh)
        throw Error("tensor '" + t.name + "' is held by both " + it->second.filename().string() + " and " +
                        f.filename().string() + " in " + s_->root.string(),
                    ExitCode::bad_input);
      const auto w = s_->where.find(t.name);
      if (w == s_->where.end())
        throw Error(s_->index.string() + ": shard " + f.filename().string() + " holds tensor '" + t.name +
                        "', which the index does not list",
                    ExitCode::bad_input);
      if (w->second != f)
        throw Error(s_->index.string() + ": the index puts tensor '" + t.name + "' in " +
                        w->second.filename().string() + " but it is in " + f.filename().string(),
                    ExitCode::bad_input);
    }
  }
  for (const auto& [name, file] : s_->where)
    if (!seen.count(name))
      throw Error(s_->index.string() + ": the index puts tensor '" + name + "' in " + file.filename().string() +
                      ", which does not hold it",
                  ExitCode::bad_input);
}

std::uint64_t WeightSource::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& f : s_->files) n += s_->file(f).data_size();
  return n;
}

}  // namespace yeto::io
