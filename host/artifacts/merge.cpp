#include "artifacts/merge.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <set>

#include <ATen/ATen.h>

#include "artifacts/adapter.hpp"
#include "artifacts/shards.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/sha256.hpp"
#include "core/strings.hpp"
#include "io/aliases.hpp"
#include "io/provenance.hpp"
#include "io/repository.hpp"
#include "io/tensors.hpp"

namespace yeto::artifacts {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Weight files (of any variant) a merged component folder must not carry over.
bool is_weight_file(const std::string& name) {
  for (const char* ext : {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5"})
    if (ends_with(name, ext)) return true;
  return name.find(".safetensors.index") != std::string::npos || name.find(".bin.index") != std::string::npos ||
         (name.find(".index.") != std::string::npos && ends_with(name, ".json"));
}

// The repository component an adapter component addresses ("" for a one-model directory).
std::string repo_component(const io::DiffusersRepo& repo, const std::string& adapter_component) {
  if (repo.single_model()) return repo.components().front().name;
  return repo.require(adapter_component).name;
}

const io::ComponentInfo& component_info(const io::DiffusersRepo& repo, const std::string& name) {
  if (name.empty()) return repo.components().front();
  return repo.require(name);
}

void copy_stream(const fs::path& from, const fs::path& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) throw Error("cannot read " + from.string(), ExitCode::failure);
  AtomicFile out(to);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) out.write(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  out.commit();
}

// Hard link when source and target share a file system, else an atomic copy. Symlinks (hub
// snapshots point into blobs/) are followed.
void link_or_copy(const fs::path& from, const fs::path& to, MergeReport& report) {
  fs::create_directories(to.parent_path());
  std::error_code ec;
  fs::create_hard_link(fs::canonical(from), to, ec);
  if (!ec) {
    ++report.linked;
    return;
  }
  copy_stream(fs::canonical(from), to);
  ++report.copied;
}

void link_tree(const fs::path& from, const fs::path& to, MergeReport& report) {
  if (fs::is_directory(from)) {
    fs::create_directories(to);
    for (const auto& e : fs::directory_iterator(from)) link_tree(e.path(), to / e.path().filename(), report);
  } else if (fs::is_regular_file(from)) {
    link_or_copy(from, to, report);
  }
}

std::string weight_stem(const io::WeightSource& ws) {
  const std::string first = ws.files().front().filename().string();
  return first.rfind("model", 0) == 0 ? "model" : "diffusion_pytorch_model";
}

// A full fine-tune exported by `export` (tuning.mode = full): the record and the trained tensors.
struct FullWeights {
  fs::path file;
  json record;
  std::string component;
  std::map<std::string, at::Tensor> tensors;
};

bool is_full_weights_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(dir / kFullWeightsFile, ec);
}

FullWeights read_full_weights(const fs::path& dir) {
  FullWeights f;
  f.file = dir / kFullWeightsFile;
  const fs::path record_file = dir / kRecordFile;
  try {
    f.record = json::parse(read_file(record_file));
  } catch (const json::exception& e) {
    throw Error(record_file.string() + ": not valid JSON (" + e.what() + ")", ExitCode::bad_input);
  } catch (const Error& e) {
    throw Error(dir.string() + " holds " + kFullWeightsFile + " but no readable " + kRecordFile + " (" + e.what() +
                    "); export the run again",
                ExitCode::bad_input);
  }
  if (!f.record.is_object() || !f.record.contains("full") || !f.record["full"].is_object() ||
      !f.record["full"].value("component", json()).is_string())
    throw Error(record_file.string() + ": no \"full\": {\"component\": ...} entry for " + kFullWeightsFile +
                    "; export the run again",
                ExitCode::bad_input);
  f.component = f.record["full"]["component"].get<std::string>();
  f.tensors = io::load_safetensors(f.file);
  if (f.tensors.empty()) throw Error(f.file.string() + ": holds no tensors", ExitCode::bad_input);
  return f;
}

// New values for some of a component's weights, by weight name: each computes the merged
// tensor from the base one (read when it is written, one tensor at a time).
using Replacements = std::map<std::string, std::function<at::Tensor(const at::Tensor& base)>>;

// W += scale * B @ A for every module of the adapter's component, checked against the base.
Replacements lora_replacements(const io::WeightSource& ws, const Adapter& adapter, const std::string& adapter_component) {
  Replacements out;
  for (const auto& [path, m] : adapter.modules_of(adapter_component)) {
    const std::string wname = path + ".weight";
    if (!ws.has(wname)) {
      throw Error(adapter.file.string() + ": adapter module '" + adapter_component + "." + path +
                      "' has no base weight '" + wname + "' in " + ws.root().string() + did_you_mean(wname, ws.names()) +
                      "; the adapter was made for another model",
                  ExitCode::bad_input);
    }
    const auto loc = ws.locate(wname);
    const auto& shape = loc.info->shape;
    if (shape.size() != 2 || shape[0] != m->B.size(0) || shape[1] != m->A.size(1)) {
      throw Error(adapter.file.string() + ": adapter module '" + adapter_component + "." + path + "' is " +
                      std::to_string(m->A.size(1)) + " -> " + std::to_string(m->B.size(0)) + " but base weight '" + wname +
                      "' is " + io::shape_str(shape) + "; the adapter was made for another model",
                  ExitCode::bad_input);
    }
    if (loc.info->dtype == io::DType::F8_E4M3 || loc.info->dtype == io::DType::F8_E5M2) {
      throw Error(ws.root().string() + ": base weight '" + wname + "' is " + io::dtype_name(loc.info->dtype) +
                      "; merging into float8 weights is not supported (merge into a bf16/fp16/fp32 base)",
                  ExitCode::bad_input);
    }
    const LoraModule* lora = m;
    out.emplace(wname, [lora](const at::Tensor& base) {
      return (base.to(at::kFloat) + at::mm(lora->B, lora->A).mul_(lora->scale)).to(base.scalar_type());
    });
  }
  return out;
}

// A full fine-tune's tensors written over the base: every one must be a base weight of the same
// shape (cast to the base's dtype).
Replacements full_replacements(const io::WeightSource& ws, const FullWeights& full) {
  Replacements out;
  for (const auto& [name, t] : full.tensors) {
    if (!ws.has(name))
      throw Error(full.file.string() + ": trained tensor '" + name + "' is not a weight of " + ws.root().string() +
                      did_you_mean(name, ws.names()) + "; the fine-tune was made for another model",
                  ExitCode::bad_input);
    const auto& shape = ws.locate(name).info->shape;
    if (std::vector<std::int64_t>(shape.begin(), shape.end()) != t.sizes().vec())
      throw Error(full.file.string() + ": trained tensor '" + name + "' is " + io::shape_str(t.sizes().vec()) +
                      " but the base weight is " + io::shape_str(shape) + "; the fine-tune was made for another model",
                  ExitCode::bad_input);
    const at::Tensor trained = t;
    out.emplace(name, [trained](const at::Tensor& base) { return trained.to(base.scalar_type()); });
  }
  return out;
}

// The component's weights with `replace` applied, as shards of at most max_shard_bytes.
MergedComponent merge_component(const io::WeightSource& ws, const std::string& name, const Replacements& replace,
                                const MergeOptions& o, const fs::path& out_dir) {
  MergedComponent mc;
  mc.component = name;
  std::vector<TensorHeader> headers;
  std::vector<std::uint64_t> sizes;
  for (const auto& n : ws.names()) {
    const auto loc = ws.locate(n);
    headers.push_back({n, loc.info->dtype, loc.info->shape});
    sizes.push_back(loc.info->nbytes);
    mc.total_bytes += loc.info->nbytes;
  }
  const auto plan = plan_shards(sizes, o.max_shard_bytes);
  const std::string stem = weight_stem(ws);
  std::map<std::string, std::string> weight_map;
  std::vector<char> buf;
  for (std::size_t s = 0; s < plan.size(); ++s) {
    const std::string file = shard_file_name(stem, s, plan.size());
    std::vector<TensorHeader> shard;
    for (auto i : plan[s]) shard.push_back(headers[i]);
    SafetensorsStreamWriter w(out_dir / file, shard);
    for (auto i : plan[s]) {
      const auto& h = headers[i];
      const auto loc = ws.locate(h.name);
      auto it = replace.find(h.name);
      if (it == replace.end()) {
        buf.resize(loc.info->nbytes);
        loc.file.copy_to(*loc.info, buf.data());
        w.write(h.name, buf.data(), buf.size());
      } else {
        const at::Tensor merged = it->second(io::to_tensor(loc.file, *loc.info)).contiguous();
        w.write(h.name, merged.data_ptr(), merged.nbytes());
        ++mc.modules;
      }
      loc.file.release(*loc.info);
      weight_map.emplace(h.name, file);
    }
    w.commit();
    mc.shards.push_back(out_dir / file);
  }
  if (plan.size() > 1) {
    mc.index = out_dir / (stem + ".safetensors.index.json");
    atomic_write(mc.index, shard_index(mc.total_bytes, weight_map).dump(2) + "\n");
  }
  return mc;
}

}  // namespace

std::string component_fingerprint(const io::DiffusersRepo& repo, const std::string& component) {
  const auto& c = component_info(repo, component);
  std::vector<std::pair<std::string, fs::path>> files;
  if (!c.config_file.empty()) files.emplace_back(c.config_file.filename().string(), c.config_file);
  if (c.has_weights) {
    const io::WeightSource ws = io::WeightSource::open(c.dir, repo.variant());
    for (const auto& f : ws.files()) files.emplace_back(f.filename().string(), f);
    if (!ws.index_file().empty()) files.emplace_back(ws.index_file().filename().string(), ws.index_file());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& [rel, path] : files) text += rel + " " + io::cached_sha256(path) + "\n";
  return sha256_hex(text);
}

json base_model_record(const std::string& spec, const io::ResolvedRepo& resolved, const io::DiffusersRepo& repo,
                       const std::vector<std::string>& components) {
  json comps = json::object();
  for (const auto& c : components) comps[c] = component_fingerprint(repo, repo_component(repo, c));
  return {{"spec", spec},
          {"id", resolved.id},
          {"revision", resolved.revision},
          {"commit", resolved.commit},
          {"path", resolved.path.string()},
          {"components", comps}};
}

std::vector<std::string> base_mismatches(const json& record, const io::ResolvedRepo& resolved,
                                         const io::DiffusersRepo& repo) {
  std::vector<std::string> out;
  if (!record.is_object() || !record.contains("base_model") || !record["base_model"].is_object()) return out;
  const json& b = record["base_model"];
  const std::string id = b.value("id", std::string()), commit = b.value("commit", std::string());
  const std::string spec = b.value("spec", std::string());
  if (!id.empty() && !resolved.id.empty() && id != resolved.id)
    out.push_back("model id: adapter trained on " + id + ", --model is " + resolved.id);
  if (!commit.empty() && !resolved.commit.empty() && commit != resolved.commit)
    out.push_back("commit: adapter trained on " + (id.empty() ? spec : id) + "@" + commit + ", --model resolves to " +
                  resolved.id + "@" + resolved.commit);
  if (b.contains("components") && b["components"].is_object()) {
    for (const auto& [name, fp] : b["components"].items()) {
      if (!fp.is_string()) continue;
      std::string rc;
      try {
        rc = repo_component(repo, name);
      } catch (const Error&) {
        out.push_back("component " + name + ": the adapter's base has it, " + repo.dir().string() + " does not");
        continue;
      }
      const std::string have = component_fingerprint(repo, rc);
      if (have != fp.get<std::string>())
        out.push_back("component " + name + " content: adapter trained on " + (spec.empty() ? id : spec) + " (sha256 " +
                      fp.get<std::string>().substr(0, 12) + "...), " + resolved.describe() + " has sha256 " +
                      have.substr(0, 12) + "...");
    }
  }
  return out;
}

AdapterArg parse_adapter_arg(const std::string& arg) {
  AdapterArg out{arg, ""};
  const auto colon = arg.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == arg.size() || fs::exists(arg)) return out;
  const std::string comp = arg.substr(colon + 1);
  const bool ident = std::all_of(comp.begin(), comp.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
  if (!ident) return out;
  out.path = arg.substr(0, colon);
  out.component = comp;
  return out;
}

MergeReport merge_adapter(const MergeOptions& o) {
  if (o.output_dir.empty()) throw UsageError("merge needs --output-dir DIR");
  if (o.max_shard_bytes == 0) throw UsageError("--max-shard-size must be positive");
  const io::ResolvedModel model = io::resolve_model(o.model, o.revision, io::hub_cache(o.hub_cache));
  const io::DiffusersRepo repo = io::DiffusersRepo::open(model.repo.path, o.variant);

  std::vector<std::string> known;
  for (const auto& c : repo.components()) {
    if (!c.has_weights) continue;
    const io::WeightSource ws = io::WeightSource::open(c.dir, o.variant);
    const std::string comp = c.name.empty() ? "transformer" : c.name;
    for (const auto& n : ws.names())
      if (ends_with(n, ".weight")) known.push_back(comp + "." + n.substr(0, n.size() - 7));
  }
  ReadOptions ro;
  ro.known_modules = known;
  // Layouts without a component in their names (PEFT, model-level files) address the denoiser.
  for (const char* d : {"transformer", "unet", "prior"})
    if (repo.component(d)) {
      ro.component = d;
      break;
    }
  // Two experts (Wan 2.2): Diffusers names either one's LoRA "transformer.", so an adapter
  // without a record needs DIR:COMPONENT.
  for (const char* d : {"transformer", "transformer_2"})
    if (repo.component(d)) ro.denoisers.push_back(d);
  if (!o.component.empty()) {
    if (!repo.single_model() && !repo.component(o.component))
      throw UsageError("--adapter-dir " + o.adapter.string() + ":" + o.component + ": " + repo.dir().string() +
                       " has no component " + o.component);
    ro.into = o.component;
  }
  // A LoRA adapter (any layout read_adapter reads), or a full fine-tune exported by `export`.
  const bool full = is_full_weights_dir(o.adapter);
  Adapter adapter;
  FullWeights trained;
  if (full) {
    trained = read_full_weights(o.adapter);
    if (!o.component.empty() && o.component != trained.component)
      throw UsageError("--adapter-dir " + o.adapter.string() + ":" + o.component + ": the fine-tune is of " +
                       trained.component);
  } else {
    adapter = read_adapter(o.adapter, ro);
  }
  const json& record = full ? trained.record : adapter.record;
  const std::string what = full ? "fine-tune" : "adapter";

  const auto mismatches = base_mismatches(record, model.repo, repo);
  if (!mismatches.empty()) {
    throw Error("the " + what + " " + o.adapter.string() + " was trained on another base than --model " + o.model +
                    ":\n  " + join(mismatches, "\n  ") + "\nmerge it into the model it was trained on",
                ExitCode::bad_input);
  }
  const std::vector<std::string> components = full ? std::vector<std::string>{trained.component} : adapter.components();
  if (repo.single_model() && components.size() != 1) {
    throw Error(o.adapter.string() + ": the adapter addresses " + join(components, ", ") + " but " +
                    repo.dir().string() + " is a single model",
                ExitCode::bad_input);
  }

  // Every replacement is checked against the base before anything is written.
  struct Planned {
    io::WeightSource ws;
    Replacements replace;
  };
  std::map<std::string, Planned> merged;  // repo component -> its weights and replacements
  for (const auto& ac : components) {
    const std::string rc = repo_component(repo, ac);
    io::WeightSource ws = io::WeightSource::open(component_info(repo, rc).dir, o.variant);
    Replacements replace = full ? full_replacements(ws, trained) : lora_replacements(ws, adapter, ac);
    merged.emplace(rc, Planned{std::move(ws), std::move(replace)});
  }

  std::error_code ec;
  if (fs::exists(o.output_dir) && !fs::is_empty(o.output_dir, ec)) {
    throw UsageError("--output-dir " + o.output_dir.string() + " exists and is not empty; choose a new directory");
  }
  const fs::path src = fs::weakly_canonical(repo.dir());
  const fs::path dst = fs::weakly_canonical(o.output_dir);
  if (dst == src || dst.string().rfind(src.string() + "/", 0) == 0) {
    throw UsageError("--output-dir " + o.output_dir.string() + " is inside the base model " + repo.dir().string());
  }
  fs::create_directories(o.output_dir);

  MergeReport report;
  report.full = full;
  for (const auto& [rc, plan] : merged) {
    const auto& info = component_info(repo, rc);
    const fs::path out = rc.empty() ? o.output_dir : o.output_dir / rc;
    fs::create_directories(out);
    report.components.push_back(merge_component(plan.ws, rc, plan.replace, o, out));
    // The folder's other files (config.json, ...) travel with it; its old weights do not.
    for (const auto& e : fs::directory_iterator(info.dir)) {
      const std::string n = e.path().filename().string();
      if (is_weight_file(n)) continue;
      if (rc.empty() && e.is_directory()) continue;
      link_tree(e.path(), out / n, report);
    }
    spdlog::info("merged {} {} into {} ({} shard(s), {} bytes)", report.components.back().modules,
                 full ? "fully trained tensors" : "LoRA modules", rc.empty() ? std::string("the model") : rc,
                 report.components.back().shards.size(), report.components.back().total_bytes);
  }
  if (!repo.single_model()) {
    for (const auto& e : fs::directory_iterator(repo.dir())) {
      const std::string n = e.path().filename().string();
      if (merged.count(n) || n == ".cache" || n == ".git") continue;
      link_tree(e.path(), o.output_dir / n, report);
    }
  }
  fsync_directory(o.output_dir);
  return report;
}

}  // namespace yeto::artifacts
