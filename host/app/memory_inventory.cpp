#include "app/memory_inventory.hpp"

#include <ATen/ATen.h>

#include <set>

#include <spdlog/spdlog.h>

#include "app/commands.hpp"
#include "config/config.hpp"
#include "config/schema.hpp"
#include "core/error.hpp"
#include "io/repository.hpp"
#include "io/weights.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/instance.hpp"

namespace yeto::app {
namespace {

std::string dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return "f32";
    case at::kDouble: return "f64";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "f16";
    case at::kByte: return "u8";
    case at::kChar: return "i8";
    case at::kShort: return "i16";
    case at::kInt: return "i32";
    case at::kLong: return "i64";
    case at::kBool: return "bool";
    default: throw Error(std::string("memory inventory: unexpected dtype ") + c10::toString(t.scalar_type()));
  }
}

memory::TensorEntry entry(const std::string& name, const at::Tensor& t) {
  return {name, t.sizes().vec(), dtype_of(t)};
}

}  // namespace

memory::Inventory build_memory_inventory(const std::optional<std::filesystem::path>& file,
                                         std::vector<config::Override> overrides, const std::string& precision) {
  overrides.push_back({"model.storage", "auto", "memory inventory"});
  if (!precision.empty()) overrides.push_back({"model.precision", precision, "memory inventory"});
  const config::Config cfg = config::Config::resolve(file, overrides);
  pipeline::OpenOptions opts;
  opts.load_weights = false;
  std::unique_ptr<pipeline::Pipeline> p;
  {
    io::DeferredInit deferred;  // nothing is initialised or paged in
    p = pipeline::Pipeline::open(cfg, opts);
  }
  memory::Inventory inv;
  inv.model = pipeline::model_spec(cfg);
  const auto& plan = p->plan();
  const std::string where = "plugin " + p->loaded_plugin().manifest.name + "'s plan";
  inv.tokens = memory::TokenGeometry::from_json(plan.value("memory", nlohmann::json()), where);
  if (!plan.contains("memory"))
    spdlog::warn("memory: the {} family declares no token geometry (its family file's \"memory\"); activations use "
                 "16 pixels per token and joint attention",
                 p->loaded_plugin().manifest.name);
  if (const auto n = cfg.get_int("model.max_sequence_length"); n > 0) inv.tokens.text_tokens = static_cast<int>(n);
  const auto denoisers = p->denoisers();
  // The trainable tensors (LoRA) are the component's parameters too once attached: listed once,
  // as LoRA, not as frozen base.
  const auto trainable = p->plugin().trainable_parameters();
  std::set<const void*> trained;
  for (const auto& [n, t] : trainable) {
    inv.lora.push_back(entry(n, t));
    trained.insert(t.unsafeGetTensorImpl());
  }
  std::string compute;
  for (const auto& name : p->component_names()) {
    const yeto_component_v1* c = p->component(name);
    if (c == nullptr) continue;
    memory::ComponentEntry ce;
    ce.name = name;
    const auto& comps = plan.value("components", nlohmann::json::object());
    if (comps.contains(name) && comps[name].is_object()) ce.class_name = comps[name].value("class", "");
    ce.denoiser = std::find(denoisers.begin(), denoisers.end(), name) != denoisers.end();
    for (const auto& [n, t] : plugin::component_parameters(*c)) {
      if (!t.defined() || trained.count(t.unsafeGetTensorImpl())) continue;
      ce.parameters.push_back(entry(n, t));
      if (ce.denoiser && t.is_floating_point() && compute.empty()) compute = dtype_of(t);
    }
    if (ce.parameters.empty()) continue;
    if (ce.denoiser)
      if (const io::ComponentInfo* info = p->repo().component(name)) {
        const auto& conf = info->config;
        if (conf.contains(inv.tokens.heads_key) && conf[inv.tokens.heads_key].is_number_integer())
          inv.heads[name] = conf[inv.tokens.heads_key].get<int>();
      }
    inv.components.push_back(std::move(ce));
  }
  inv.compute_dtype = compute.empty() ? "f32" : compute;
  return inv;
}

int parse_count(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  long v = -1;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 0 || v > 1000000) throw UsageError(what + " '" + text + "': expected a count (0 or more)");
  return static_cast<int>(v);
}

memory::RunShape memory_run_shape(CommandContext& ctx) {
  memory::RunShape run = run_shape_from_config(ctx.config());
  if (ctx.has("block-swap")) run.block_swap = parse_count(ctx.value("block-swap"), "--block-swap");
  if (ctx.has("backend")) {
    const std::string b = ctx.value("backend");
    if (b != "cpu" && b != "cuda") throw UsageError("--backend '" + b + "': expected cpu or cuda");
    run.backend = b == "cuda" ? memory::Backend::cuda : memory::Backend::cpu;
    run.fused_attention = run.backend == memory::Backend::cuda;  // CUDA LibTorch 2.x: SDPA
  }
  run.cached_latents = ctx.has("cached-latents");
  return run;
}

memory::RunShape run_shape_from_config(const config::Config& cfg) {
  memory::RunShape r;
  r.height = static_cast<int>(cfg.get_int("data.height"));
  r.width = static_cast<int>(cfg.get_int("data.width"));
  r.frames = static_cast<int>(cfg.get_int("data.num_frames"));
  r.text_tokens = static_cast<int>(cfg.get_int("model.max_sequence_length"));
  r.micro_batch = cfg.is_auto("train.micro_batch_size") ? 1 : static_cast<int>(cfg.get_int("train.micro_batch_size"));
  r.storage = cfg.get_string("model.storage");
  r.checkpointing = cfg.get_bool("train.activation_checkpointing");
  r.checkpointing_every = static_cast<int>(cfg.get_int("train.activation_checkpointing_every"));
  r.block_swap = static_cast<int>(cfg.get_int("model.block_swap"));
  if (cfg.get_string("train.shard") == "fsdp") r.fsdp_ranks = static_cast<int>(cfg.get_int("train.island_ranks"));
  r.backend = memory::Backend::cpu;
  r.fused_attention = false;  // LibTorch 1.13 on the CPU has no fused attention
  return r;
}

}  // namespace yeto::app
