#include "pipeline/pipeline.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "core/error.hpp"
#include "core/sha256.hpp"
#include "core/strings.hpp"
#include "io/aliases.hpp"
#include "io/fp8_scaled.hpp"
#include "io/hub.hpp"
#include "io/provenance.hpp"
#include "io/repository.hpp"
#include "io/tensor_files.hpp"
#include "io/tensors.hpp"
#include "io/weight_source.hpp"
#include "io/weights.hpp"
#include "models/model_components.hpp"
#include "pipeline/host_components.hpp"
#include "plugin/components.hpp"
#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"
#include "schedulers/multistep.hpp"
#include "schedulers/scheduler.hpp"
#include "yeto/nn/state_dict.hpp"

namespace yeto::pipeline {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Tensors per load_weights call are capped by bytes: a batch is the only float copy that
// exists besides the component's own parameters.
constexpr std::uint64_t kBatchBytes = 64ull << 20;

struct Built {
  std::string name;
  std::string class_name;
  std::string kind;
  std::string origin;  // "host" or "plugin NAME"
  fs::path dir;        // empty: none (a component the plan makes from its config only)
  fs::path config_file;
  json config = json::object();
  std::unique_ptr<const yeto_component_v1, plugin::ComponentDeleter> table;
  std::shared_ptr<io::Component> host;  // host classes
};

std::string precision_name(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    default: return "fp32";
  }
}

std::string device_name(const at::Device& d) {
  return d.is_cuda() ? "cuda:" + std::to_string(d.has_index() ? d.index() : 0) : "cpu";
}

at::Device run_device(const config::Config& cfg) {
  const std::string& d = cfg.get_string("run.device");
  if (d == "cpu") return at::Device(at::kCPU);
  if (d == "cuda") {
    if (!at::hasCUDA())
      throw UsageError("run.device = \"cuda\", but this build or machine has no CUDA device; use \"cpu\" or \"auto\"");
    return at::Device(at::kCUDA, 0);
  }
  return at::hasCUDA() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

at::ScalarType run_dtype(const config::Config& cfg, const at::Device& device) {
  const std::string& p = cfg.get_string("model.precision");
  if (p == "fp32") return at::kFloat;
  if (p == "bf16") return at::kBFloat16;
  if (p == "fp16") return at::kHalf;
  return device.is_cuda() ? at::kBFloat16 : at::kFloat;  // auto
}

json lora_targets(const std::vector<std::string>& t) {
  if (t.size() == 1 && (t[0] == "auto" || t[0] == "attention" || t[0] == "all-linear")) return t[0];
  return t;
}

std::string first_names(const std::vector<std::string>& v, std::size_t n = 6) {
  std::vector<std::string> head(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size())));
  std::string s = join(head, ", ");
  if (v.size() > n) s += " and " + std::to_string(v.size() - n) + " more";
  return s;
}

// One checkpoint tensor a component receives: its name in the component, its shape, how to read
// it (cast to the run's dtype and device) and, for a tensor viewing a safetensors mapping, the
// entry whose pages can be given back once the component has its own copy.
struct WeightItem {
  std::string name;
  std::vector<std::int64_t> shape;
  std::function<at::Tensor(bool* mapped)> read;
  const io::WeightSource::Located* located = nullptr;
  // A scaled fp8 weight (io/fp8_scaled.hpp): `read` gives its e4m3 codes (uint8, viewing the
  // mapping) and this its per-row float32 scales, handed over next to it as `<name>_scale`; the
  // family kit keeps the codes (model.storage = "fp8") or dequantises them.
  std::function<at::Tensor()> scale = {};
};

// Where a component's weights come from: its folder (every tensor), or a plan's single file
// ("weights") whose tensors under "weights_prefix" are the component's (the prefix dropped),
// less the names under any "ignore_weights" prefix. A .safetensors file is mapped; a torch.save
// archive (.ckpt, .pt, .pth, .bin) is read weights-only once per pipeline and shared.
struct WeightPlan {
  fs::path file;  // empty: the component folder
  std::string prefix;
  std::vector<std::string> ignore;
};

using PtCache = std::map<fs::path, std::shared_ptr<const std::vector<std::pair<std::string, at::Tensor>>>>;

bool has_prefix(const std::string& n, const std::string& p) { return n.compare(0, p.size(), p) == 0; }

// Streams a component's weights into a C component, one tensor at a time (cast to the run's
// dtype and device), handing them over in batches of at most kBatchBytes.
void stream_weights(const Built& b, const yeto_component_v1& c, const std::string& variant, at::ScalarType dtype,
                    const at::Device& device, const std::vector<std::string>& optional_missing, const WeightPlan& wp,
                    PtCache& pt_cache) {
  const std::string where = "component '" + b.name + "' (" + b.class_name + ", " + b.origin + ")";
  std::string from;
  std::optional<io::WeightSource> ws;
  std::vector<io::WeightSource::Located> located;  // stable: items point into it
  std::shared_ptr<const std::vector<std::pair<std::string, at::Tensor>>> pt;
  std::vector<WeightItem> items;
  const auto selected = [&](const std::string& n) -> std::optional<std::string> {
    if (!has_prefix(n, wp.prefix)) return std::nullopt;
    std::string local = n.substr(wp.prefix.size());
    for (const auto& i : wp.ignore)
      if (has_prefix(local, i)) return std::nullopt;
    return local;
  };
  const std::string ext = wp.file.extension().string();
  if (!wp.file.empty() && ext != ".safetensors") {
    from = wp.file.string() + (wp.prefix.empty() ? std::string() : " (keys under '" + wp.prefix + "')");
    auto& cached = pt_cache[wp.file];
    if (!cached) {
      spdlog::info("pipeline: reading {} (a torch.save archive, weights only)", wp.file.string());
      cached = std::make_shared<const std::vector<std::pair<std::string, at::Tensor>>>(io::load_tensor_file(wp.file));
    }
    pt = cached;
    for (const auto& [n, t] : *pt)
      if (auto local = selected(n))
        items.push_back({*local, t.sizes().vec(), [t = t, dtype, device](bool* mapped) {
                           *mapped = false;
                           return t.to(device, t.is_floating_point() ? dtype : t.scalar_type());
                         }});
  } else {
    ws = io::WeightSource::open(wp.file.empty() ? b.dir : wp.file, variant);
    from = (wp.file.empty() ? ws->root() : wp.file).string() +
           (wp.prefix.empty() ? std::string() : " (keys under '" + wp.prefix + "')");
    std::vector<std::pair<std::string, std::string>> names;  // local, stored
    for (const auto& n : ws->names())
      if (auto local = selected(n)) names.emplace_back(*local, n);
    located.reserve(names.size());
    for (const auto& [local, n] : names) located.push_back(ws->locate(n));
    // Scaled fp8 weights: their scales (and the scaled_fp8 marker, input scales) are consumed.
    std::vector<std::pair<std::string, const io::TensorInfo*>> headers;
    for (std::size_t i = 0; i < names.size(); ++i) headers.emplace_back(names[i].first, located[i].info);
    const auto fp8 = io::pair_fp8_scales(headers, where + ", " + from);
    if (fp8.input_scales)
      spdlog::info("pipeline: {}: {} scale_input tensors ignored (fp8 storage is weight-only; activations stay in "
                   "the compute dtype)", b.name, fp8.input_scales);
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < names.size(); ++i) index.emplace(names[i].first, i);
    // In file order (shard by shard, by offset), so the mapping is read front to back.
    std::vector<std::size_t> order(names.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      if (located[x].file.path() != located[y].file.path()) return located[x].file.path() < located[y].file.path();
      return located[x].info->offset < located[y].info->offset;
    });
    for (const std::size_t i : order) {
      const auto* loc = &located[i];
      if (fp8.consumed.count(names[i].first)) continue;
      if (const auto f = fp8.scale_of.find(names[i].first); f != fp8.scale_of.end()) {
        const auto* sloc = f->second.empty() ? nullptr : &located[index.at(f->second)];
        const std::int64_t rows = loc->info->shape.empty() ? 1 : loc->info->shape[0];
        items.push_back({names[i].first, loc->info->shape,
                         [loc, device](bool* mapped) {
                           *mapped = device.is_cpu();
                           at::Tensor codes = io::fp8_codes(loc->file, *loc->info);
                           if (device.is_cpu()) return codes;
                           at::Tensor out = codes.to(device);
                           codes = at::Tensor();
                           loc->file.release(*loc->info);
                           return out;
                         },
                         loc, [loc, sloc, rows, device] {
                           return io::fp8_row_scales(sloc ? sloc->file : loc->file, sloc ? sloc->info : nullptr, rows)
                               .to(device);
                         }});
        continue;
      }
      items.push_back({names[i].first, loc->info->shape,
                       [loc, dtype, device](bool* mapped) { return io::tensor_as(loc->file, *loc->info, dtype, device, mapped); },
                       loc, nullptr});
    }
  }
  std::map<std::string, at::Tensor> params;
  for (auto& [n, t] : plugin::component_parameters(c)) params.emplace(n, t);
  std::set<std::string> have;
  std::vector<std::string> unexpected, missing, mismatched;
  for (const auto& item : items) {
    have.insert(item.name);
    const auto it = params.find(item.name);
    if (it == params.end()) {
      unexpected.push_back(wp.prefix + item.name);
      continue;
    }
    if (item.shape != it->second.sizes().vec())
      mismatched.push_back(wp.prefix + item.name + " (checkpoint " + io::shape_str(item.shape) + ", component " +
                           io::shape_str(it->second.sizes().vec()) + ")");
  }
  for (const auto& [n, t] : params)
    if (!have.count(n) && !nn::name_matches(n, optional_missing)) missing.push_back(wp.prefix + n);
  if (!unexpected.empty() || !missing.empty() || !mismatched.empty()) {
    std::string msg = where + ": the weights in " + from + " do not match the component:";
    if (!mismatched.empty()) msg += " shape mismatch for " + first_names(mismatched) + ";";
    if (!missing.empty()) msg += " missing " + first_names(missing) + ";";
    if (!unexpected.empty()) msg += " unexpected " + first_names(unexpected) + ";";
    msg += wp.file.empty() ? " check that model_index.json / the plan names the right class and config for this folder"
                           : " check that the checkpoint and its config belong together";
    throw Error(msg, ExitCode::bad_input);
  }
  plugin::NamedTensors batch;
  std::vector<const io::WeightSource::Located*> mapped;  // batch tensors that view a mapping
  // Mapped tensors the component kept so far: one it lets go of later (train.shard = "fsdp"
  // copies a block's piece out once all of the block has arrived) has its pages given back then.
  std::vector<std::pair<at::Tensor, const io::WeightSource::Located*>> kept_mapped;
  std::uint64_t bytes = 0;
  auto release_dropped = [&] {
    std::erase_if(kept_mapped, [](auto& k) {
      if (k.first.use_count() > 1 || k.first.storage().use_count() > 1) return false;
      k.first = at::Tensor();
      k.second->file.release(*k.second->info);
      return true;
    });
  };
  auto flush = [&] {
    if (batch.empty()) return;
    try {
      plugin::component_load_weights(c, batch, R"({"strict": true})");
    } catch (const Error& e) {
      throw Error(where + ": loading weights from " + from + " failed: " + e.what(), ExitCode::bad_input);
    }
    // A mapped tensor the component kept is its weight now (file-backed); the pages of one it
    // only read (converted, quantised) are given back.
    std::size_t k = 0;
    for (auto& [n, t] : batch) {
      (void)n;
      if (k < mapped.size() && mapped[k]) {
        const bool kept = t.use_count() > 1 || t.storage().use_count() > 1;
        if (kept) kept_mapped.emplace_back(std::move(t), mapped[k]);
        t = at::Tensor();
        if (!kept) mapped[k]->file.release(*mapped[k]->info);
      }
      ++k;
    }
    release_dropped();
    batch.clear();
    mapped.clear();
    bytes = 0;
  };
  for (const auto& item : items) {
    bool is_mapped = false;
    at::Tensor t = item.read(&is_mapped);
    bytes += static_cast<std::uint64_t>(t.numel()) * t.element_size();
    batch.emplace_back(item.name, std::move(t));
    mapped.push_back(is_mapped ? item.located : nullptr);
    if (item.scale) {
      batch.emplace_back(item.name + "_scale", item.scale());
      mapped.push_back(nullptr);
    }
    if (bytes >= kBatchBytes) flush();
  }
  flush();
}

// Moves every floating parameter and buffer of a C component to the run's dtype and device
// in place (set_data keeps the component's own tensors, so its modules see the change).
void cast_component(const yeto_component_v1& c, at::ScalarType dtype, const at::Device& device) {
  torch::NoGradGuard no_grad;
  for (auto& [n, t] : plugin::component_parameters(c)) {
    if (!t.defined()) continue;
    const bool fp = t.is_floating_point();
    if ((fp && t.scalar_type() != dtype) || t.device() != device)
      t.set_data(fp ? t.to(device, dtype) : t.to(device));
  }
}

}  // namespace

struct Pipeline::State : plugin::ComponentSource {
  std::string spec;
  io::ResolvedModel resolved;
  std::optional<io::DiffusersRepo> repo;
  std::string model_id;
  std::string model_commit;
  fs::path model_dir;
  const plugin::LoadedPlugin* loaded = nullptr;
  const yeto_host_api* api = nullptr;
  std::unique_ptr<plugin::Instance> instance;
  json plan = json::object();
  std::vector<Built> comps;
  std::map<std::string, std::string> absent;  // component -> why the plan has none
  std::shared_ptr<schedulers::Scheduler> scheduler;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::Device(at::kCPU);

  const Built* find(const std::string& name) const {
    for (const auto& b : comps)
      if (b.name == name) return &b;
    return nullptr;
  }
  const yeto_component_v1* find_component(const std::string& name) const override {
    const Built* b = find(name);
    return b ? b->table.get() : nullptr;
  }
  std::vector<std::string> component_names() const override {
    std::vector<std::string> out;
    for (const auto& b : comps) out.push_back(b.name);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string missing_reason(const std::string& name) const override {
    const auto it = absent.find(name);
    return it == absent.end() ? "" : it->second;
  }

  ~State() override {
    if (api) plugin::unbind_host_api(api, this);
    instance.reset();  // the plugin's borrowed components stay valid until its instance ends
    comps.clear();
  }
};

Pipeline::Pipeline() : s_(std::make_unique<State>()) {}
Pipeline::~Pipeline() = default;

std::string model_spec(const config::Config& cfg) {
  const std::string spec = cfg.get_string("model.id");
  const auto& e = cfg.entry("model.id");
  const std::filesystem::path p(spec);
  std::error_code ec;
  if (!spec.empty() && p.is_relative() && !e.base_dir.empty() && std::filesystem::is_directory(e.base_dir / p, ec))
    return (e.base_dir / p).lexically_normal().string();
  return spec;
}

std::unique_ptr<Pipeline> Pipeline::open(const config::Config& cfg, const OpenOptions& options) {
  ensure_builtin_components();
  std::unique_ptr<Pipeline> p(new Pipeline());
  State& s = *p->s_;

  // 1. The model.
  s.spec = cfg.get_string("model.id");
  if (s.spec.empty())
    throw UsageError("model.id is not set: name a local Diffusers directory, an org/name id in the Hugging Face "
                     "cache or a built-in alias (--model, or [model] id = \"...\" in the run file)");
  s.spec = model_spec(cfg);
  s.resolved = io::resolve_model(s.spec, cfg.get_string("model.revision"), io::hub_cache(cfg.get_path("model.hub_cache")));
  s.model_dir = s.resolved.repo.path;
  s.model_id = s.resolved.repo.local ? s.spec : s.resolved.repo.id;
  s.model_commit = s.resolved.repo.commit;
  // A directory without model_index.json (or one model's config) is a layout only its plugin
  // knows (a release's single-file checkpoint): it opens empty and the plan describes it.
  const bool indexed = io::DiffusersRepo::is_indexed(s.model_dir);
  s.repo = indexed ? io::DiffusersRepo::open(s.model_dir) : io::DiffusersRepo::open_unindexed(s.model_dir);
  s.device = run_device(cfg);
  s.dtype = run_dtype(cfg, s.device);
  if (cfg.get_string("model.storage") == "fp8" && cfg.get_string("tuning.mode") == "full")
    throw UsageError("model.storage = \"fp8\" keeps the frozen base as 8-bit codes, which cannot be trained; "
                     "tuning.mode = \"full\" needs model.storage = \"auto\" (or train LoRA adapters)");

  // 2. The plugin, with a host API table bound to this pipeline.
  const plugin::LoaderOptions lo = plugin::LoaderOptions::from_config(cfg);
  const plugin::Selection selection =
      plugin::select_plugin(cfg, plugin::Catalog::scan(lo.dirs), lo, &s.repo->model_index());
  if (selection.name.empty() && !indexed)
    io::DiffusersRepo::open(s.model_dir);  // throws: not a Diffusers model (no model_index.json, no config.json)
  if (selection.name.empty()) {
    const auto& index = s.repo->model_index();
    const std::string cls = index.contains("_class_name") && index["_class_name"].is_string()
                                ? index["_class_name"].get<std::string>()
                                : std::string("no _class_name");
    throw Error("model '" + s.spec + "' (" + cls + ") is served by no plugin this build ships" +
                    (selection.hint.empty() ? "" : ": " + selection.hint) +
                    ". Set model.adapter (--diffusion-adapter NAME) to the plugin that serves it (`yeto-host plugins "
                    "list` shows the installed ones)",
                ExitCode::plugin_not_found);
  }
  spdlog::info("plugin {} serves {} (chosen by {})", selection.name, s.spec, selection.reason);
  plugin::HostApiOptions ho;
  ho.plugin_name = selection.name;
  ho.config_values = plugin::config_values(cfg);
  ho.seed = static_cast<std::uint64_t>(cfg.get_int("diffusion.seed"));
  ho.logical_rank = options.logical_rank;
  ho.pipeline = &s;
  ho.shard_group = options.shard_group;
  const yeto_host_api* api = plugin::make_host_api(ho);
  s.api = api;  // unbinds on destruction whatever happens below
  s.loaded = &plugin::load(selection.name, lo, api);
  if (s.loaded->host_api && s.loaded->host_api != api) {
    // Loaded before (an earlier pipeline in this process): rebind the table it holds.
    plugin::unbind_host_api(api, &s);
    plugin::bind_host_api(s.loaded->host_api, ho);
    s.api = s.loaded->host_api;
  }
  const std::string origin = "plugin " + s.loaded->manifest.name;
  s.instance = std::make_unique<plugin::Instance>(*s.loaded, ho.config_values.dump());

  // 3. The plugin's component classes; then the host's, for component_create.
  auto& creg = plugin::ComponentRegistry::global();
  if (s.instance->has(YETO_CAP_COMPONENTS)) s.instance->register_components(creg);
  register_host_classes(creg, io::ComponentRegistry::global());

  // 4. The plan: model_index.json's components, with the plugin's entries on top.
  json comps = json::object();
  for (const auto& c : s.repo->components()) {
    if (c.name.empty()) continue;
    comps[c.name] = {{"class", c.class_name}, {"dir", c.dir.string()}};
  }
  // Components the repository lists as [null, null] (a transformer-only repository for
  // cached-latent training) are absent; a hook that needs one is told which and why.
  const json& index = s.repo->model_index();
  for (const auto& [name, v] : index.items())
    if (!name.empty() && name[0] != '_' && v.is_array() && v.size() == 2 && v[0].is_null() && v[1].is_null())
      s.absent[name] = "model_index.json of " + s.model_dir.string() + " lists '" + name +
                       "' as null, so this model has none, but this step needs it. Train on cached latents and "
                       "text embeddings (`yeto-host cache`, or a dataset whose rows carry them), or use a "
                       "repository that has the component";
  if (s.instance->has(YETO_CAP_PIPELINE)) {
    const std::string text = s.instance->load_pipeline(s.model_dir.string(), s.repo->model_index().dump());
    json plan = json::parse(text, nullptr, false);
    if (plan.is_discarded() || !plan.is_object())
      throw Error("plugin '" + s.loaded->manifest.name + "' load_pipeline returned no JSON object: " + text.substr(0, 300),
                  ExitCode::plugin_manifest);
    if (plan.contains("components")) {
      if (!plan["components"].is_object())
        throw Error("plugin '" + s.loaded->manifest.name + "' plan: \"components\" must be an object",
                    ExitCode::plugin_manifest);
      for (const auto& [name, v] : plan["components"].items()) {
        if (v.is_null()) {
          comps.erase(name);
          if (!s.absent.count(name))
            s.absent[name] = "plugin '" + s.loaded->manifest.name + "' leaves '" + name +
                             "' out of its pipeline (its load_pipeline plan maps it to null)";
          continue;
        }
        if (!v.is_object())
          throw Error("plugin '" + s.loaded->manifest.name + "' plan: component '" + name + "' must be an object or null",
                      ExitCode::plugin_manifest);
        json& e = comps[name];
        if (!e.is_object()) e = json::object();
        for (const auto& [k, x] : v.items()) e[k] = x;
      }
    }
    s.plan = plan;
  }
  s.plan["components"] = comps;
  if (options.plan_only) return p;

  // 5. Build every planned component.
  PtCache pt_cache;  // torch.save archives the plan names, read once
  for (const auto& [name, e] : comps.items()) {
    const std::string where = "model " + s.model_dir.string() + ", component '" + name + "'";
    if (!e.contains("class") || !e["class"].is_string() || e["class"].get<std::string>().empty())
      throw Error(where + ": the plan gives no class", ExitCode::bad_input);
    Built b;
    b.name = name;
    b.class_name = e["class"].get<std::string>();
    b.kind = e.contains("kind") && e["kind"].is_string() ? e["kind"].get<std::string>() : kind_for_component_name(name);
    WeightPlan wp;
    if (e.contains("weights")) {
      if (!e["weights"].is_string() || e["weights"].get<std::string>().empty())
        throw Error(where + ": the plan's \"weights\" must name a file", ExitCode::plugin_manifest);
      wp.file = e["weights"].get<std::string>();
      if (wp.file.is_relative()) wp.file = s.model_dir / wp.file;
      std::error_code ec;
      if (!fs::is_regular_file(wp.file, ec))
        throw Error(where + ": weights file " + wp.file.string() + " does not exist", ExitCode::not_found);
      if (e.contains("weights_prefix") && e["weights_prefix"].is_string()) wp.prefix = e["weights_prefix"];
      if (e.contains("ignore_weights") && e["ignore_weights"].is_array())
        for (const auto& x : e["ignore_weights"])
          if (x.is_string()) wp.ignore.push_back(x.get<std::string>());
    }
    if (e.contains("dir") && e["dir"].is_string() && !e["dir"].get<std::string>().empty()) {
      b.dir = e["dir"].get<std::string>();
      if (b.dir.is_relative()) b.dir = s.model_dir / b.dir;
      std::error_code ec;
      if (!fs::is_directory(b.dir, ec))
        throw Error(where + ": folder " + b.dir.string() + " does not exist", ExitCode::not_found);
    }
    if (const io::ComponentInfo* info = s.repo->component(name); info && info->dir == b.dir) {
      b.config = info->config;
      b.config_file = info->config_file;
    } else if (!b.dir.empty()) {
      for (const char* f : {"config.json", "scheduler_config.json", "tokenizer_config.json"})
        if (fs::is_regular_file(b.dir / f)) {
          b.config_file = b.dir / f;
          b.config = io::read_json_file(b.config_file);
          break;
        }
    }
    if (e.contains("config") && e["config"].is_object())
      for (const auto& [k, x] : e["config"].items()) b.config[k] = x;
    std::vector<std::string> optional_missing;
    if (e.contains("optional_missing") && e["optional_missing"].is_array())
      for (const auto& x : e["optional_missing"])
        if (x.is_string()) optional_missing.push_back(x.get<std::string>());

    const std::string class_origin = creg.origin(b.class_name);
    if (class_origin.rfind("plugin ", 0) == 0) {
      // The plugin's class: random init, then the host streams the folder's weights in.
      b.origin = class_origin;
      creg.set_kind(b.class_name, b.kind);
      // With weights to load, built without initialising them (DeferredInit): the checkpoint's
      // tensors replace the placeholders. Without (init-model), seeded random weights.
      const bool load = options.load_weights && (!b.dir.empty() || !wp.file.empty());
      std::optional<io::DeferredInit> deferred;
      if (load) deferred.emplace();
      b.table.reset(creg.create(b.class_name, b.config.dump(), ""));
      cast_component(*b.table, s.dtype, s.device);
      if (load) {
        // A weightless class (no parameters) in a folder without weights has nothing to load;
        // anything else without weights is an error WeightSource reports.
        const io::ComponentInfo* info = s.repo->component(name);
        const bool known = info && info->dir == b.dir;
        if (!wp.file.empty() || !known || info->has_weights || !plugin::component_parameters(*b.table).empty())
          stream_weights(b, *b.table, s.repo->variant(), s.dtype, s.device, optional_missing, wp, pt_cache);
        io::DeferredInit::check_initialized(plugin::component_parameters(*b.table),
                                            where + " (" + b.class_name + ")");
      }
    } else {
      b.origin = "host";
      if (!wp.file.empty())
        throw Error(where + ": the plan names a weights file for " + b.class_name +
                        ", a host class; single-file weights load into the plugin's own classes only",
                    ExitCode::plugin_manifest);
      const auto model_classes = models::model_component_classes();
      if (std::find(model_classes.begin(), model_classes.end(), b.class_name) != model_classes.end()) {
        const std::string cfg_where = (b.config_file.empty() ? b.dir / "config.json" : b.config_file).string();
        const bool load = options.load_weights && !b.dir.empty();
        std::optional<io::DeferredInit> deferred;
        if (load) deferred.emplace();
        auto m = models::build_model_component(b.class_name, b.config, cfg_where);
        m->module().to(s.device, s.dtype);
        if (load) {
          models::load_component_weights(m->module(), b.class_name, io::WeightSource::open(b.dir, s.repo->variant()),
                                         /*strict=*/true);
          plugin::NamedTensors all;
          for (const auto& t : m->module().named_parameters()) all.emplace_back(t.key(), t.value());
          for (const auto& t : m->module().named_buffers()) all.emplace_back(t.key(), t.value());
          io::DeferredInit::check_initialized(all, where + " (" + b.class_name + ")");
        }
        m->module().eval();
        b.host = m;
      } else {
        io::ComponentSource src{b.class_name, b.dir, b.config, s.repo->variant()};
        try {
          b.host = io::ComponentRegistry::global().create(src);
        } catch (const Error& x) {
          throw Error(where + ": " + x.what() +
                          (class_origin.empty() ? std::string(" (neither the host nor plugin '") +
                                                      s.loaded->manifest.name + "' registers it)"
                                                : std::string()),
                      x.code());
        }
      }
      b.table.reset(wrap_host_component(b.host));
      if (name == "scheduler")
        if (auto sch = std::dynamic_pointer_cast<schedulers::Scheduler>(b.host)) {
          // model.scheduler_timesteps: the Diffusers release whose timestep table it follows.
          schedulers::set_timestep_rule(*sch, schedulers::timestep_rule_from_name(
                                                  cfg.get_string("model.scheduler_timesteps"), "model.scheduler_timesteps"));
          s.scheduler = sch;
        }
    }
    spdlog::debug("pipeline: built {} ({}, {}) from {}", name, b.class_name, b.origin,
                  b.dir.empty() ? std::string("its config") : b.dir.string());
    s.comps.push_back(std::move(b));
  }

  // 6. Reachable from the plugin now (component_get); prepare.
  if (options.prepare && s.instance->has(YETO_CAP_PIPELINE)) {
    const json prep = {{"lora",
                        {{"targets", lora_targets(cfg.get_list("lora.targets"))},
                         {"r", cfg.get_int("lora.r")},
                         {"alpha", cfg.get_number("lora.alpha")},
                         {"dropout", cfg.get_number("lora.dropout")}}},
                       {"tuning", cfg.get_string("tuning.mode")},
                       {"precision", precision_name(s.dtype)},
                       {"device", device_name(s.device)}};
    s.instance->prepare(prep.dump());
  }
  spdlog::info("pipeline {} ready: {} components, plugin {} {}, {} on {}", s.model_id, s.comps.size(),
               s.loaded->manifest.name, s.loaded->manifest.version, precision_name(s.dtype), device_name(s.device));
  return p;
}

plugin::Instance& Pipeline::plugin() { return *s_->instance; }
const plugin::LoadedPlugin& Pipeline::loaded_plugin() const { return *s_->loaded; }
const io::DiffusersRepo& Pipeline::repo() const { return *s_->repo; }
const fs::path& Pipeline::model_dir() const { return s_->model_dir; }
const std::string& Pipeline::model_id() const { return s_->model_id; }
const std::string& Pipeline::model_commit() const { return s_->model_commit; }
const json& Pipeline::plan() const { return s_->plan; }

const yeto_component_v1* Pipeline::component(const std::string& name) const { return s_->find_component(name); }

std::vector<std::string> Pipeline::component_names() const { return s_->component_names(); }

std::vector<std::string> Pipeline::denoisers() const {
  std::vector<std::string> out;
  for (const char* n : {"transformer", "transformer_2", "unet", "model"})
    if (s_->find(n)) out.emplace_back(n);
  // A denoiser under another name: the plugin's plan gives it the kind "denoiser".
  for (const auto& b : s_->comps)
    if (b.kind == "denoiser" && std::find(out.begin(), out.end(), b.name) == out.end()) out.push_back(b.name);
  return out;
}

std::shared_ptr<schedulers::Scheduler> Pipeline::scheduler() const { return s_->scheduler; }

std::map<std::string, std::string> Pipeline::component_hashes() const {
  std::map<std::string, std::string> out;
  for (const auto& b : s_->comps) {
    std::string record = "yeto-component v1\nclass " + b.class_name + "\n";
    if (b.dir.empty()) {
      record += "config " + sha256_hex(b.config.dump()) + "\n";
    } else {
      std::set<fs::path> files;
      if (!b.config_file.empty()) files.insert(b.config_file.lexically_relative(b.dir));
      for (const auto& f : io::weight_files_under(b.dir)) files.insert(f);
      const io::ComponentInfo* info = s_->repo->component(b.name);
      if (info && info->dir == b.dir)
        for (const auto& f : info->tokenizer_files) files.insert(f.lexically_relative(b.dir));
      for (const auto& f : files) record += f.generic_string() + " " + io::cached_sha256(b.dir / f) + "\n";
    }
    out[b.name] = sha256_hex(record);
  }
  return out;
}

void Pipeline::record_provenance(io::Provenance& provenance) const {
  provenance.add_source("model", s_->spec, s_->resolved.repo);
  json comps = json::object();
  const auto hashes = component_hashes();
  for (const auto& b : s_->comps)
    comps[b.name] = {{"class", b.class_name}, {"origin", b.origin}, {"sha256", hashes.at(b.name)}};
  provenance.set("model_components", comps);
  provenance.set("model_precision", precision_name(s_->dtype));
  plugin::record_provenance(provenance);
}

}  // namespace yeto::pipeline
