#include "artifacts/adapter.hpp"

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "io/safetensors.hpp"
#include "io/tensors.hpp"
#include "yeto/nn/linear.hpp"

namespace yeto::artifacts {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPeftPrefix = "base_model.model.";

// Component folders a Diffusers pipeline-level LoRA file prefixes its keys with.
const std::set<std::string>& component_prefixes() {
  static const std::set<std::string> s = {"transformer", "transformer_2", "unet", "prior",
                                          "text_encoder", "text_encoder_2", "text_encoder_3"};
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string flatten(std::string s) {
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

Error bad(const fs::path& file, const std::string& what) {
  return Error(file.string() + ": " + what, ExitCode::bad_input);
}

struct Pair {
  at::Tensor A, B, alpha;
};

at::Tensor as_float(const at::Tensor& t) { return t.to(at::kFloat).contiguous(); }

// Checks the pair and turns it into a module. `key` names it in errors.
LoraModule make_module(const fs::path& file, const std::string& key, const Pair& p, const char* a_name,
                       const char* b_name) {
  if (!p.A.defined() || !p.B.defined()) {
    throw bad(file, "LoRA module '" + key + "' has only " + (p.A.defined() ? a_name : b_name) + ", not " +
                        (p.A.defined() ? b_name : a_name) + "; the file is incomplete");
  }
  if (p.A.dim() != 2 || p.B.dim() != 2 || p.B.size(1) != p.A.size(0)) {
    throw bad(file, "LoRA module '" + key + "': " + a_name + " " + io::shape_str(p.A.sizes().vec()) + " and " +
                        b_name + " " + io::shape_str(p.B.sizes().vec()) +
                        " are not a [r, in] / [out, r] pair (convolution LoRAs are not supported)");
  }
  LoraModule m;
  m.A = as_float(p.A);
  m.B = as_float(p.B);
  return m;
}

struct LoraConfigView {
  std::int64_t r = 0;
  double alpha = 0;
  bool has_alpha = false;
  bool use_rslora = false;
  json rank_pattern = json::object();
  json alpha_pattern = json::object();
};

const json* first_pattern(const json& patterns, const std::string& module) {
  if (!patterns.is_object()) return nullptr;
  for (const auto& [k, v] : patterns.items())
    if (peft_pattern_matches(k, module)) return &v;
  return nullptr;
}

// PEFT's scale for one module: alpha / r (alpha / sqrt(r) with rsLoRA), patterns first.
double peft_scale(const fs::path& file, const LoraConfigView& c, const std::string& module, std::int64_t tensor_rank) {
  std::int64_t r = c.r;
  if (const json* v = first_pattern(c.rank_pattern, module)) r = v->get<std::int64_t>();
  double alpha = c.alpha;
  if (const json* v = first_pattern(c.alpha_pattern, module)) alpha = v->get<double>();
  if (r != tensor_rank) {
    throw bad(file, "LoRA module '" + module + "' has rank " + std::to_string(tensor_rank) + " but the config says r = " +
                        std::to_string(r) + "; the config does not belong to these weights");
  }
  return c.use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

LoraConfigView config_view(const json& j, const fs::path& where, const std::string& prefix = "") {
  LoraConfigView c;
  auto get = [&](const std::string& k) -> const json* {
    auto it = j.find(prefix + k);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  try {
    if (const json* v = get("r")) c.r = v->get<std::int64_t>();
    if (const json* v = get("lora_alpha")) {
      c.alpha = v->get<double>();
      c.has_alpha = true;
    }
    if (const json* v = get("use_rslora")) c.use_rslora = v->get<bool>();
    if (const json* v = get("rank_pattern")) c.rank_pattern = *v;
    if (const json* v = get("alpha_pattern")) c.alpha_pattern = *v;
    if (const json* v = get("use_dora"); v && v->get<bool>()) {
      throw bad(where, "DoRA adapters (use_dora) are not supported; export a plain LoRA");
    }
    if (const json* v = get("lora_bias"); v && v->get<bool>()) {
      throw bad(where, "LoRA with a bias on lora_B (lora_bias) is not supported");
    }
    if (const json* v = get("fan_in_fan_out"); v && v->get<bool>()) {
      throw bad(where, "fan_in_fan_out adapters (transposed Conv1D weights) are not supported");
    }
    if (const json* v = get("modules_to_save"); v && !v->empty()) {
      throw bad(where, "modules_to_save (fully trained modules next to the LoRA) is not supported");
    }
  } catch (const json::exception& e) {
    throw bad(where, std::string("invalid LoRA config value: ") + e.what());
  }
  return c;
}

// "<prefix><module>.lora_A.weight" -> pairs by module (prefix stripped). Anything else is an error.
std::map<std::string, Pair> ab_pairs(const fs::path& file, const std::map<std::string, at::Tensor>& tensors,
                                     const std::string& prefix) {
  std::map<std::string, Pair> pairs;
  for (const auto& [key, t] : tensors) {
    if (!starts_with(key, prefix)) {
      throw bad(file, "tensor '" + key + "' does not start with '" + prefix + "' like the other keys of this layout");
    }
    const std::string k = key.substr(prefix.size());
    if (ends_with(k, ".lora_A.weight")) {
      pairs[k.substr(0, k.size() - 14)].A = t;
    } else if (ends_with(k, ".lora_B.weight")) {
      pairs[k.substr(0, k.size() - 14)].B = t;
    } else {
      throw bad(file, "tensor '" + key +
                          "' is not a LoRA lora_A/lora_B weight (DoRA magnitudes, LoRA biases and full-weight "
                          "diffs are not supported)");
    }
  }
  return pairs;
}

Adapter read_peft(const fs::path& dir, const ReadOptions& o) {
  Adapter a;
  a.layout = Layout::peft;
  a.file = dir / kPeftWeightsFile;
  const fs::path cfg_file = dir / kPeftConfigFile;
  try {
    a.peft_config = json::parse(read_file(cfg_file));
  } catch (const json::exception& e) {
    throw bad(cfg_file, std::string("not valid JSON: ") + e.what());
  }
  if (!a.peft_config.is_object()) throw bad(cfg_file, "expected a JSON object");
  const std::string type = a.peft_config.value("peft_type", std::string());
  if (type != "LORA") throw bad(cfg_file, "peft_type is '" + type + "', only LORA adapters are supported");
  const LoraConfigView c = config_view(a.peft_config, cfg_file);
  if (c.r <= 0 || !c.has_alpha) throw bad(cfg_file, "needs positive 'r' and 'lora_alpha'");
  if (!fs::exists(a.file)) throw Error(a.file.string() + ": PEFT weights missing next to " + cfg_file.string(), ExitCode::not_found);
  const auto tensors = io::load_safetensors(a.file);
  for (auto& [module, p] : ab_pairs(a.file, tensors, kPeftPrefix)) {
    LoraModule m = make_module(a.file, kPeftPrefix + module, p, "lora_A", "lora_B");
    m.scale = peft_scale(cfg_file, c, module, m.rank());
    a.modules.emplace((o.into.empty() ? o.component : o.into) + "." + module, std::move(m));
  }
  a.implicit_component = o.into.empty();
  return a;
}

// Diffusers >= 0.35 keeps the LoRA config in the safetensors metadata; v0.33 files have none.
std::optional<LoraConfigView> diffusers_metadata_config(const io::SafetensorsFile& f, const std::string& component,
                                                        bool prefixed) {
  const auto& md = f.metadata();
  auto it = md.find("lora_adapter_metadata");
  if (it == md.end()) return std::nullopt;
  json j;
  try {
    j = json::parse(it->second);
  } catch (const json::exception& e) {
    throw bad(f.path(), std::string("metadata lora_adapter_metadata is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return std::nullopt;
  LoraConfigView c = config_view(j, f.path(), prefixed ? component + "." : "");
  if (!c.has_alpha) return std::nullopt;
  return c;
}

Adapter read_ab_file(const fs::path& file, const std::map<std::string, at::Tensor>& tensors, const ReadOptions& o) {
  Adapter a;
  a.file = file;
  // Group keys by their first segment: a component prefix, PEFT's base_model.model., or none.
  std::map<std::string, std::map<std::string, at::Tensor>> groups;  // prefix ("" = model-level)
  for (const auto& [key, t] : tensors) {
    std::string prefix;
    if (starts_with(key, kPeftPrefix)) {
      prefix = kPeftPrefix;
    } else {
      const auto dot = key.find('.');
      if (dot != std::string::npos && component_prefixes().count(key.substr(0, dot))) prefix = key.substr(0, dot + 1);
    }
    groups[prefix].emplace(key, t);
  }
  if (groups.count("") && groups.size() > 1) {
    throw bad(file, "mixes keys with a component prefix ('" + groups.rbegin()->first + "...') and without one ('" +
                        groups.at("").begin()->first + "')");
  }
  a.layout = groups.count("") || groups.count(kPeftPrefix) ? Layout::diffusers_model : Layout::diffusers;
  const auto st = io::SafetensorsFile::open(file);
  for (const auto& [prefix, group] : groups) {
    const bool named = !prefix.empty() && prefix != kPeftPrefix;
    const std::string key_component = named ? prefix.substr(0, prefix.size() - 1) : o.component;
    // Diffusers names every expert's LoRA "transformer." (or nothing): the chosen or recorded
    // component says which expert it is for.
    std::string component = key_component;
    if (!named || key_component == "transformer") {
      if (!o.into.empty()) {
        component = o.into;
      } else {
        a.implicit_component = true;
      }
    } else if (!o.into.empty() && starts_with(key_component, "transformer") && key_component != o.into) {
      throw bad(file, "keys are prefixed '" + prefix + "' but the adapter is for " + o.into +
                          " (its yeto_diffusion_adapter.json lora.component or the DIR:" + o.into +
                          " given); pass DIR:" + key_component + " to read it for " + key_component);
    }
    const auto meta = diffusers_metadata_config(st, key_component, named);
    for (auto& [module, p] : ab_pairs(file, group, prefix)) {
      LoraModule m = make_module(file, prefix + module, p, "lora_A", "lora_B");
      if (meta) {
        m.scale = peft_scale(file, *meta, module, m.rank());
      } else {
        m.scale = o.alpha ? *o.alpha / static_cast<double>(m.rank()) : 1.0;
      }
      if (!a.modules.emplace(component + "." + module, std::move(m)).second)
        throw bad(file, "LoRA module '" + component + "." + module + "' appears twice (under '" + prefix +
                            "' and another prefix read as " + component + ")");
    }
  }
  return a;
}

// The flattened ComfyUI / kohya names a canonical module may appear under.
std::vector<std::string> comfy_names(const std::string& canonical) {
  const auto dot = canonical.find('.');
  const std::string comp = canonical.substr(0, dot), flat = flatten(canonical.substr(dot + 1));
  std::vector<std::string> names = {"lora_" + comp + "_" + flat};
  if (comp == "transformer") names.push_back("lycoris_" + flat);
  if (comp == "text_encoder") names.insert(names.end(), {"lora_te_" + flat, "lora_te1_" + flat});
  if (comp == "text_encoder_2") names.push_back("lora_te2_" + flat);
  return names;
}

Adapter read_comfy(const fs::path& file, const std::map<std::string, at::Tensor>& tensors,
                   const std::vector<std::string>& known, const ReadOptions& o) {
  Adapter a;
  a.layout = Layout::comfyui;
  a.file = file;
  std::map<std::string, std::string> by_flat;
  for (const auto& k : known)
    for (auto& n : comfy_names(k)) by_flat.emplace(std::move(n), k);
  std::map<std::string, Pair> pairs;  // by flat name
  for (const auto& [key, t] : tensors) {
    const auto dot = key.find('.');
    const std::string flat = key.substr(0, dot), rest = dot == std::string::npos ? "" : key.substr(dot + 1);
    if (rest == "lora_down.weight") {
      pairs[flat].A = t;
    } else if (rest == "lora_up.weight") {
      pairs[flat].B = t;
    } else if (rest == "alpha") {
      pairs[flat].alpha = t;
    } else {
      throw bad(file, "tensor '" + key + "' is not a lora_down / lora_up / alpha entry (LoCon, LoHa, LoKr and "
                                         "full-weight diffs are not supported)");
    }
  }
  for (const auto& [flat, p] : pairs) {
    auto it = by_flat.find(flat);
    if (it == by_flat.end()) {
      if (known.empty()) {
        throw bad(file, "ComfyUI key '" + flat +
                            "' cannot be mapped back to a module without the model's module names ('.' became '_', "
                            "and module names contain '_' themselves); read it through a command that loads the model "
                            "or from a directory with " + kRecordFile);
      }
      std::vector<std::string> names;
      for (const auto& [n, _] : by_flat) names.push_back(n);
      throw bad(file, "ComfyUI key '" + flat + "' names no module of this model" + did_you_mean(flat, names) +
                          " (kohya's Flux files with BFL names such as lora_unet_double_blocks_0_img_attn_qkv "
                          "are not supported)");
    }
    LoraModule m = make_module(file, flat, p, "lora_down", "lora_up");
    if (p.alpha.defined()) {
      if (p.alpha.numel() != 1) throw bad(file, "tensor '" + flat + ".alpha' must hold one value");
      m.scale = p.alpha.to(at::kDouble).item<double>() / static_cast<double>(m.rank());
    } else {
      m.scale = o.alpha ? *o.alpha / static_cast<double>(m.rank()) : 1.0;
    }
    if (!a.modules.emplace(it->second, std::move(m)).second) {
      throw bad(file, "module '" + it->second + "' appears under two ComfyUI names");
    }
  }
  return a;
}

bool is_comfy(const std::map<std::string, at::Tensor>& tensors) {
  for (const auto& [k, _] : tensors)
    if (ends_with(k, ".lora_down.weight") || ends_with(k, ".lora_up.weight")) return true;
  return false;
}

std::vector<std::string> record_modules(const json& record) {
  std::vector<std::string> out;
  if (record.is_object() && record.contains("trainable_modules") && record["trainable_modules"].is_array())
    for (const auto& m : record["trainable_modules"])
      if (m.is_string()) out.push_back(m.get<std::string>());
  return out;
}

Adapter read_file_layout(const fs::path& file, const ReadOptions& o, const json& record) {
  if (!fs::exists(file)) throw Error(file.string() + ": no such adapter file", ExitCode::not_found);
  if (file.filename() == kPeftWeightsFile && fs::exists(file.parent_path() / kPeftConfigFile)) {
    return read_peft(file.parent_path(), o);
  }
  const auto tensors = io::load_safetensors(file);
  if (tensors.empty()) throw bad(file, "holds no tensors");
  if (is_comfy(tensors)) {
    auto known = o.known_modules.empty() ? record_modules(record) : o.known_modules;
    return read_comfy(file, tensors, known, o);
  }
  return read_ab_file(file, tensors, o);
}

}  // namespace

std::string layout_name(Layout l) {
  switch (l) {
    case Layout::yeto: return "yeto";
    case Layout::peft: return "peft";
    case Layout::diffusers: return "diffusers";
    case Layout::diffusers_model: return "diffusers-model";
    case Layout::comfyui: return "comfyui";
  }
  return "?";
}

std::optional<Layout> parse_layout(const std::string& s) {
  for (Layout l : {Layout::yeto, Layout::peft, Layout::diffusers, Layout::diffusers_model, Layout::comfyui})
    if (layout_name(l) == s) return l;
  return std::nullopt;
}

std::vector<std::string> Adapter::components() const {
  std::set<std::string> s;
  for (const auto& [k, _] : modules) s.insert(k.substr(0, k.find('.')));
  return {s.begin(), s.end()};
}

std::map<std::string, const LoraModule*> Adapter::modules_of(const std::string& component) const {
  std::map<std::string, const LoraModule*> out;
  const std::string prefix = component + ".";
  for (const auto& [k, m] : modules)
    if (starts_with(k, prefix)) out.emplace(k.substr(prefix.size()), &m);
  return out;
}

std::map<std::string, at::Tensor> Adapter::canonical_tensors() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [k, m] : modules) {
    out.emplace(k + ".lora_A.weight", m.A);
    out.emplace(k + ".lora_B.weight", m.B);
  }
  return out;
}

std::map<std::string, at::Tensor> Adapter::folded_tensors() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [k, m] : modules) {
    out.emplace(k + ".lora_A.weight", m.A);
    out.emplace(k + ".lora_B.weight", (m.B.to(at::kDouble) * m.scale).to(at::kFloat));
  }
  return out;
}

bool peft_pattern_matches(const std::string& pattern, const std::string& module) {
  try {
    return std::regex_match(module, std::regex("(.*\\.)?(" + pattern + ")"));
  } catch (const std::regex_error&) {
    return pattern == module;
  }
}

bool peft_target_matches(const std::string& target, const std::string& module) {
  return module == target || ends_with(module, "." + target);
}

namespace {

json parse_record(const fs::path& record_file) {
  json record;
  try {
    record = json::parse(read_file(record_file));
  } catch (const json::exception& e) {
    throw bad(record_file, std::string("not valid JSON: ") + e.what());
  }
  if (!record.is_object() || record.value("format", std::string()) != kRecordFormat) {
    throw bad(record_file, std::string("is not a ") + kRecordFormat + " record");
  }
  return record;
}

// The record next to a single adapter file, when it lists that file among the files it wrote.
json sibling_record(const fs::path& file) {
  const fs::path record_file = file.parent_path() / kRecordFile;
  if (!fs::exists(record_file)) return nullptr;
  json record = parse_record(record_file);
  if (record.contains("files") && record["files"].is_array())
    for (const auto& f : record["files"])
      if (f.is_string() && f.get<std::string>() == file.filename().string()) return record;
  return nullptr;
}

std::string recorded_component(const json& record, const fs::path& where) {
  if (!record.is_object() || !record.contains("lora") || !record["lora"].is_object() ||
      !record["lora"].contains("component"))
    return "";
  if (!record["lora"]["component"].is_string())
    throw bad(where / kRecordFile, "lora.component is not a string");
  return record["lora"]["component"].get<std::string>();
}

}  // namespace

Adapter read_adapter(const fs::path& where, const ReadOptions& o) {
  if (!fs::exists(where)) throw Error(where.string() + ": no such adapter directory or file", ExitCode::not_found);
  const bool is_dir = fs::is_directory(where);
  const fs::path record_file = (is_dir ? where : where.parent_path()) / kRecordFile;
  json record = is_dir ? (fs::exists(record_file) ? parse_record(record_file) : json(nullptr)) : sibling_record(where);

  // Which denoiser the adapter is for: the caller's choice, else the record's.
  ReadOptions opts = o;
  const std::string recorded = recorded_component(record, is_dir ? where : where.parent_path());
  if (!o.into.empty() && !recorded.empty() && o.into != recorded)
    throw Error(where.string() + ": " + o.into + " was chosen (DIR:" + o.into + ") but " + record_file.string() +
                    " records the adapter for " + recorded + "; drop ':" + o.into + "' (or pass :" + recorded + ")",
                ExitCode::bad_input);
  opts.into = o.into.empty() ? recorded : o.into;
  if (!opts.into.empty()) opts.component = opts.into;

  auto finish = [&](Adapter a, std::optional<Layout> l = std::nullopt) {
    if (l) a.layout = *l;
    a.record = record;
    // A NaN or infinite weight would fold into the base and poison every generated pixel.
    for (const auto& [module, m] : a.modules)
      for (const auto& [which, t] : {std::pair<const char*, const at::Tensor*>{"lora_A", &m.A}, {"lora_B", &m.B}})
        if (t->defined() && !at::isfinite(*t).all().item<bool>())
          throw Error(a.file.string() + ": tensor " + module + "." + which +
                          ".weight holds a non-finite value (NaN or infinity); the adapter is damaged or its run "
                          "diverged: export it again from an earlier checkpoint",
                      ExitCode::bad_input);
    if (a.implicit_component && o.denoisers.size() > 1) {
      std::string pass;
      for (const auto& d : o.denoisers) pass += (pass.empty() ? "" : " or ") + where.string() + ":" + d;
      throw Error(where.string() + ": the model has " + std::to_string(o.denoisers.size()) + " denoisers (" +
                      join(o.denoisers, ", ") + ") and this adapter does not say which one it is for (" + a.file.string() +
                      " names its keys 'transformer.' or not at all, as Diffusers does for either expert, and there is "
                      "no " + kRecordFile + " with lora.component); pass --adapter-dir " + pass,
                  ExitCode::bad_input);
    }
    return a;
  };
  if (!is_dir) return finish(read_file_layout(where, opts, record));
  const bool peft_present = fs::exists(where / kPeftConfigFile);
  if (o.layout) {
    switch (*o.layout) {
      case Layout::yeto:
        if (record.is_null()) throw Error(record_file.string() + ": not a Yeto adapter directory", ExitCode::not_found);
        return finish(read_peft(where, opts), Layout::yeto);
      case Layout::peft:
        return finish(read_peft(where, opts), Layout::peft);
      case Layout::diffusers:
      case Layout::diffusers_model: {
        return finish(read_file_layout(where / kDiffusersFile, opts, record));
      }
      case Layout::comfyui: {
        return finish(read_file_layout(where / kComfyFile, opts, record));
      }
    }
  }
  if (!record.is_null() && peft_present) return finish(read_peft(where, opts), Layout::yeto);
  if (peft_present) return finish(read_peft(where, opts), Layout::peft);
  if (fs::exists(where / kDiffusersFile)) {
    return finish(read_file_layout(where / kDiffusersFile, opts, record));
  }
  std::vector<fs::path> candidates;
  for (const auto& e : fs::directory_iterator(where))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") candidates.push_back(e.path());
  if (candidates.size() == 1) {
    return finish(read_file_layout(candidates[0], opts, record));
  }
  if (candidates.empty()) {
    throw Error(where.string() + ": no LoRA adapter here (looked for " + kRecordFile + ", " + kPeftConfigFile + " + " +
                    kPeftWeightsFile + ", " + kDiffusersFile + " or a single .safetensors file)",
                ExitCode::not_found);
  }
  std::vector<std::string> names;
  for (const auto& c : candidates) names.push_back(c.filename().string());
  std::sort(names.begin(), names.end());
  throw Error(where.string() + ": several .safetensors files (" + join(names, ", ") +
                  ") and no adapter_config.json; name the file to read",
              ExitCode::bad_input);
}

std::vector<std::string> peft_target_modules(const std::vector<std::string>& modules,
                                             const std::vector<std::string>& candidates) {
  std::set<std::string> leaves;
  for (const auto& m : modules) {
    auto segs = split(m, '.');
    std::string leaf = segs.back();
    const bool numeric = !leaf.empty() && std::all_of(leaf.begin(), leaf.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (numeric && segs.size() >= 2) leaf = segs[segs.size() - 2] + "." + leaf;
    leaves.insert(leaf);
  }
  const std::set<std::string> wanted(modules.begin(), modules.end());
  bool exact = !candidates.empty();
  for (const auto& c : candidates) {
    const bool selected = std::any_of(leaves.begin(), leaves.end(), [&](const auto& l) { return peft_target_matches(l, c); });
    if (selected != (wanted.count(c) != 0)) {
      exact = false;
      break;
    }
  }
  if (exact) {
    // Every wanted module must itself be a candidate, or short names could not reach it.
    for (const auto& m : modules)
      if (std::find(candidates.begin(), candidates.end(), m) == candidates.end()) exact = false;
  }
  if (exact) return {leaves.begin(), leaves.end()};
  std::vector<std::string> full(wanted.begin(), wanted.end());
  return full;
}

void write_adapter_dir(const fs::path& dir, const AdapterExport& e) {
  if (e.r <= 0) throw UsageError("adapter export: LoRA rank must be positive");
  if (e.modules.empty()) throw UsageError("adapter export: no LoRA modules to write");
  fs::create_directories(dir);
  const double scale = e.alpha / static_cast<double>(e.r);

  std::vector<std::pair<std::string, at::Tensor>> diffusers, peft, comfy;
  std::vector<std::string> module_paths, canonical;
  for (const auto& [path, m] : e.modules) {
    if (m.rank() != e.r) {
      throw Error("adapter export: module '" + path + "' has rank " + std::to_string(m.rank()) + ", the recipe says r = " +
                      std::to_string(e.r),
                  ExitCode::bad_input);
    }
    const auto A = m.A.detach().to(at::kFloat).contiguous();
    const auto B = m.B.detach().to(at::kFloat).contiguous();
    const std::string pre = e.component + "." + path;
    const std::string dpre = diffusers_key_prefix(e.component) + "." + path;
    // Diffusers applies scale 1 to these files: fold alpha / r into lora_B.
    diffusers.emplace_back(dpre + ".lora_A.weight", A);
    diffusers.emplace_back(dpre + ".lora_B.weight", (B.to(at::kDouble) * scale).to(at::kFloat));
    peft.emplace_back(kPeftPrefix + path + ".lora_A.weight", A);
    peft.emplace_back(kPeftPrefix + path + ".lora_B.weight", B);
    if (e.comfyui) {
      const std::string flat = "lora_" + e.component + "_" + flatten(path);
      comfy.emplace_back(flat + ".lora_down.weight", A);
      comfy.emplace_back(flat + ".lora_up.weight", B);
      comfy.emplace_back(flat + ".alpha", at::scalar_tensor(e.alpha, at::kFloat));
    }
    module_paths.push_back(path);
    canonical.push_back(pre);
  }
  const std::map<std::string, std::string> md = {{"format", "pt"}};
  io::save_safetensors(dir / kDiffusersFile, diffusers, md);
  io::save_safetensors(dir / kPeftWeightsFile, peft, md);
  std::vector<std::string> files = {kDiffusersFile, kPeftConfigFile, kPeftWeightsFile};
  if (e.comfyui) {
    io::save_safetensors(dir / kComfyFile, comfy, md);
    files.push_back(kComfyFile);
  }

  // PEFT's LoraConfig fields (peft 0.15), as PeftModel.save_pretrained writes them.
  json auto_mapping = nullptr;
  if (!e.base_model_class.empty()) {
    auto_mapping = {{"base_model_class", e.base_model_class}, {"parent_library", "diffusers"}};
    // The Diffusers module that defines the class, as PEFT records it.
    static const std::map<std::string, std::string> modules = {
        {"FluxTransformer2DModel", "transformer_flux"},
        {"LTXVideoTransformer3DModel", "transformer_ltx"},
        {"PixArtTransformer2DModel", "pixart_transformer_2d"},
        {"SD3Transformer2DModel", "transformer_sd3"},
        {"WanTransformer3DModel", "transformer_wan"}};
    if (const auto it = modules.find(e.base_model_class); it != modules.end())
      auto_mapping["parent_library"] = "diffusers.models.transformers." + it->second;
  }
  const auto targets = e.target_modules.empty() ? peft_target_modules(module_paths, e.candidate_modules) : e.target_modules;
  json cfg = {
      {"alpha_pattern", json::object()},
      {"auto_mapping", auto_mapping},
      {"base_model_name_or_path", e.base_model_name_or_path.empty() ? json(nullptr) : json(e.base_model_name_or_path)},
      {"bias", "none"},
      {"corda_config", nullptr},
      {"eva_config", nullptr},
      {"exclude_modules", nullptr},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layer_replication", nullptr},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"loftq_config", json::object()},
      {"lora_alpha", e.alpha},
      {"lora_bias", false},
      {"lora_dropout", 0.0},
      {"megatron_config", nullptr},
      {"megatron_core", "megatron.core"},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", e.r},
      {"rank_pattern", json::object()},
      {"revision", nullptr},
      {"target_modules", targets},
      {"task_type", nullptr},
      {"trainable_token_indices", nullptr},
      {"use_dora", false},
      {"use_rslora", false},
  };
  // An integral alpha is written as an integer, as Python does for LoraConfig(lora_alpha=8).
  if (std::floor(e.alpha) == e.alpha && std::abs(e.alpha) < 1e15) cfg["lora_alpha"] = static_cast<std::int64_t>(e.alpha);
  atomic_write(dir / kPeftConfigFile, cfg.dump(2) + "\n");

  json record = e.record.is_object() ? e.record : json::object();
  record["format"] = kRecordFormat;
  record["version"] = kRecordVersion;
  record["trainable_modules"] = canonical;
  json lora = record.contains("lora") && record["lora"].is_object() ? record["lora"] : json::object();
  lora["component"] = e.component;
  lora["r"] = e.r;
  lora["alpha"] = e.alpha;
  lora["scale"] = scale;
  lora["target_modules"] = targets;
  record["lora"] = lora;
  const std::string dprefix = diffusers_key_prefix(e.component);
  record["layouts"] = {
      {"diffusers", {{"file", kDiffusersFile}, {"keys", dprefix + ".<module>.lora_A.weight / lora_B.weight"},
                     {"alpha", "folded into lora_B (Diffusers applies scale 1 to files without alpha)"},
                     {"load", dprefix == e.component
                                  ? "pipe.load_lora_weights(DIR)"
                                  : "pipe.load_lora_weights(DIR, load_into_transformer_2=True): Diffusers names "
                                    "the second expert's LoRA keys '" + dprefix + ".' too"}}},
      {"peft", {{"config", kPeftConfigFile}, {"file", kPeftWeightsFile},
                {"keys", "base_model.model.<module>.lora_A.weight / lora_B.weight"}}},
  };
  if (e.comfyui)
    record["layouts"]["comfyui"] = {{"file", kComfyFile},
                                    {"keys", "lora_" + e.component + "_<module with _>.lora_down.weight / lora_up.weight / alpha"}};
  files.push_back(kRecordFile);
  record["files"] = files;
  atomic_write(dir / kRecordFile, record.dump(2) + "\n");
}

std::string diffusers_key_prefix(const std::string& component) {
  // Diffusers' two-expert loaders (Wan 2.2) read only "transformer."-prefixed keys and pick the
  // expert with load_into_transformer_2=True.
  if (starts_with(component, "transformer_") && component.size() > 12 &&
      std::all_of(component.begin() + 12, component.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return "transformer";
  return component;
}

std::vector<std::string> lora_capable_paths(torch::nn::Module& root) {
  std::vector<std::string> out;
  for (auto& [path, _] : nn::lora_capable_layers(root)) out.push_back(path);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> apply_adapter(torch::nn::Module& root, const Adapter& adapter, const std::string& component,
                                       const std::string& name) {
  std::map<std::string, nn::Linear> layers;
  for (auto& [path, layer] : nn::lora_capable_layers(root)) layers.emplace(path, layer);
  const auto mods = adapter.modules_of(component);
  if (mods.empty()) {
    throw Error(adapter.file.string() + ": the adapter has no modules for component '" + component + "' (it has: " +
                    join(adapter.components(), ", ") + ")",
                ExitCode::bad_input);
  }
  std::vector<std::string> done;
  for (const auto& [path, m] : mods) {
    auto it = layers.find(path);
    const std::string tensor = component + "." + path + ".lora_A.weight";
    if (it == layers.end()) {
      std::vector<std::string> names;
      for (const auto& [p, _] : layers) names.push_back(p);
      throw Error(adapter.file.string() + ": adapter tensor '" + tensor + "' names no Linear layer of the " + component +
                      did_you_mean(path, names) + "; the adapter was made for another model",
                  ExitCode::bad_input);
    }
    auto& layer = it->second;
    if (m->A.size(1) != layer->in_features() || m->B.size(0) != layer->out_features()) {
      throw Error(adapter.file.string() + ": adapter module '" + component + "." + path + "' is " +
                      std::to_string(m->A.size(1)) + " -> " + std::to_string(m->B.size(0)) + " but the layer is " +
                      std::to_string(layer->in_features()) + " -> " + std::to_string(layer->out_features()) +
                      "; the adapter was made for another model",
                  ExitCode::bad_input);
    }
    nn::LoraConfig cfg;
    cfg.r = m->rank();
    cfg.alpha = static_cast<double>(cfg.r);  // scale 1 x multiplier = the module's scale exactly
    cfg.init = "zeros";
    if (layer->has_adapter(name)) layer->remove_adapter(name);
    layer->add_adapter(name, cfg);
    layer->set_scale_multiplier(name, m->scale);
    at::NoGradGuard no_grad;
    layer->lora_A(name).copy_(m->A);
    layer->lora_B(name).copy_(m->B);
    done.push_back(path);
  }
  return done;
}

}  // namespace yeto::artifacts
