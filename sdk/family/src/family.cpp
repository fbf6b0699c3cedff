#include "yeto/family/family.hpp"

#include <ATen/CPUGeneratorImpl.h>
#if defined(YETO_HAVE_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace yeto::family {

using nlohmann::json;
using sdk::fail;
using sdk::Host;

json parse_json(const std::string& text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(YETO_ERR_INVALID_ARGUMENT, what + ": invalid JSON: " + e.what());
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(YETO_ERR_NOT_FOUND, path + ": cannot open");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json read_json_file(const std::string& path) { return parse_json(read_text_file(path), path); }

std::string python_nonfinite_to_null(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* lit : {"-Infinity", "Infinity", "NaN"}) {
      const std::string l = lit;
      if (text.compare(i, l.size(), l) == 0) {
        out += "null";
        i += l.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

json host_config(const std::string& key) {
  if (!Host::api() || !Host::api()->config_get) return json();
  try {
    return json::parse(Host::config_json(key));
  } catch (const std::exception&) {
    return json();
  }
}

std::string host_config_string(const std::string& key, const std::string& fallback) {
  const auto j = host_config(key);
  return j.is_string() ? j.get<std::string>() : fallback;
}

std::int64_t host_config_int(const std::string& key, std::int64_t fallback) {
  const auto j = host_config(key);
  return j.is_number_integer() ? j.get<std::int64_t>() : fallback;
}

nn::BlockCheckpointing run_block_checkpointing() {
  nn::BlockCheckpointing policy;
  const auto on = host_config("train.activation_checkpointing");
  policy.enabled = on.is_boolean() && on.get<bool>();
  policy.every = host_config_int("train.activation_checkpointing_every", 1);
  if (policy.every < 1)
    fail(YETO_ERR_INVALID_ARGUMENT,
         "train.activation_checkpointing_every must be at least 1, got " + std::to_string(policy.every));
  return policy;
}

bool set_block_checkpointing(torch::nn::Module& model, const nn::BlockCheckpointing& policy) {
  auto* blocks = dynamic_cast<nn::CheckpointedBlocks*>(&model);
  if (!blocks) return false;
  blocks->activation_checkpointing = policy;
  return true;
}

std::vector<std::string> conditioning_prompts(const json& p) {
  if (!p.is_array() || p.empty()) fail(YETO_ERR_INVALID_ARGUMENT, "encode_conditioning: expected a JSON array of prompts");
  std::vector<std::string> prompts;
  for (const auto& s : p) {
    if (!s.is_string()) fail(YETO_ERR_INVALID_ARGUMENT, "encode_conditioning: every prompt must be a string");
    prompts.push_back(s.get<std::string>());
  }
  return prompts;
}

at::ScalarType dtype_of(const std::string& precision) {
  if (precision == "bf16") return at::kBFloat16;
  if (precision == "fp16") return at::kHalf;
  return at::kFloat;
}

at::Device device_of(const std::string& device) {
  if (device == "auto" || device.empty()) return at::hasCUDA() ? at::Device("cuda:0") : at::Device(at::kCPU);
  try {
    return at::Device(device);
  } catch (const c10::Error&) {
    fail(YETO_ERR_INVALID_ARGUMENT, "device: '" + device + "' is not a device name (cpu, cuda, cuda:N)");
  }
}

Placement placement(const std::string& device, const std::string& precision, const std::string& key) {
  const auto d = device_of(device);
  return {d, dtype_of(resolve_precision(precision, d.str(), key))};
}

Placement run_placement(const std::string& key) {
  return placement(host_config_string("run.device", "auto"), host_config_string("model.precision", "auto"), key);
}

Placement prepare_placement(const json& options, const std::string& key) {
  return placement(options.value("device", std::string("auto")), options.value("precision", std::string("auto")), key);
}

void place_for_run(torch::nn::Module& model) {
  const auto p = run_placement();
  model.to(p.device, p.dtype);
  model.eval();
}

const at::Tensor& output(const NamedTensors& out, const std::string& name, const std::string& component) {
  for (const auto& [n, t] : out)
    if (n == name) return t;
  fail(YETO_ERR_INTERNAL, component + " returned no '" + name + "' tensor");
}

torch::nn::Module& plugin_module(const std::string& name, const std::string& plugin) {
  const auto c = sdk::Host::component(name);
  auto* impl = c.as<ModuleComponent>(c.class_name());
  if (!impl)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT,
              "the pipeline's " + name + " is " + c.class_name() + ", not a model built by the " + plugin + " plugin");
  return impl->module();
}

NamedTensors module_tensors(torch::nn::Module& model, bool with_buffers) {
  NamedTensors out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value());
  if (with_buffers)
    for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

void load_module_weights(torch::nn::Module& model, const NamedTensors& weights, bool strict, const std::string& cls,
                         const std::string& hint, bool with_buffers) {
  at::NoGradGuard no_grad;
  auto params = model.named_parameters();
  auto buffers = model.named_buffers();
  // model.storage = fp8: the LoRA-capable Linear weights are kept as e4m3 codes with per-row
  // scales (Linear::store_fp8), quantised from the tensor given, which the component then drops.
  std::map<std::string, nn::Linear> fp8_layers;
  if (host_config_string("model.storage", "auto") == "fp8")
    for (const auto& [path, layer] : nn::lora_capable_layers(model))
      fp8_layers.emplace(path.empty() ? "weight" : path + ".weight", layer);
  // A scaled fp8 checkpoint's weight arrives as its e4m3 codes (uint8) followed by
  // `<name>_scale` (float32 per-row scales): fp8 layers keep the codes as they are, every other
  // destination takes decode(code) x scale in its dtype.
  std::map<std::string, at::Tensor> fp8_scales;
  for (const auto& [name, t] : weights) {
    if (t.scalar_type() != at::kByte) continue;
    const at::Tensor* dst = params.find(name);
    if (!dst && with_buffers) dst = buffers.find(name);
    if (dst && dst->is_floating_point()) fp8_scales.emplace(name, at::Tensor());
  }
  for (const auto& [name, t] : weights)
    if (name.size() > 6 && name.compare(name.size() - 6, 6, "_scale") == 0)
      if (const auto it = fp8_scales.find(name.substr(0, name.size() - 6)); it != fp8_scales.end()) it->second = t;
  for (const auto& [name, t] : weights) {
    if (name.size() > 6 && name.compare(name.size() - 6, 6, "_scale") == 0 &&
        fp8_scales.count(name.substr(0, name.size() - 6)))
      continue;  // consumed with its codes
    at::Tensor* dst = params.find(name);
    if (!dst && with_buffers) dst = buffers.find(name);
    if (!dst) {
      if (strict) fail(YETO_ERR_INVALID_ARGUMENT, cls + " has no parameter '" + name + "' (" + hint + ")");
      continue;
    }
    if (dst->sizes() != t.sizes())
      fail(YETO_ERR_INVALID_ARGUMENT, cls + " tensor '" + name + "': checkpoint shape " + c10::str(t.sizes()) +
                                          ", model shape " + c10::str(dst->sizes()));
    if (const auto sc = fp8_scales.find(name); sc != fp8_scales.end()) {
      if (!sc->second.defined())
        fail(YETO_ERR_INVALID_ARGUMENT, cls + " tensor '" + name + "': uint8 (float8 codes) without its '" + name +
                                            "_scale'; a scaled fp8 weight needs its scale");
      try {
        const auto codes = t.to(dst->device());
        const auto scale = sc->second.to(dst->device(), at::kFloat);
        if (const auto it = fp8_layers.find(name); it != fp8_layers.end())
          it->second->store_fp8_codes(codes, scale, dst->scalar_type());
        else
          dst->set_data(nn::dequantize_e4m3(codes, scale, dst->scalar_type()).to(dst->device()));
      } catch (const std::invalid_argument& e) {
        fail(YETO_ERR_INVALID_ARGUMENT, cls + " tensor '" + name + "': " + e.what());
      }
    } else if (const auto it = fp8_layers.find(name); it != fp8_layers.end()) {
      try {
        it->second->store_fp8(t.to(dst->device(), dst->is_floating_point() ? dst->scalar_type() : t.scalar_type()));
      } catch (const std::invalid_argument& e) {
        fail(YETO_ERR_INVALID_ARGUMENT, cls + " tensor '" + name + "': " + e.what());
      }
    } else if (dst->scalar_type() == t.scalar_type() && dst->device() == t.device())
      // Same dtype and device: the parameter takes the tensor itself (a 16-bit checkpoint the
      // host maps stays file-backed, never copied); otherwise one converting copy.
      dst->set_data(t);
    else
      dst->copy_(t);
  }
  shard_loaded_blocks(model, weights);
}

void shard_loaded_blocks(torch::nn::Module& model, const NamedTensors& weights) {
  auto* blocks = dynamic_cast<nn::CheckpointedBlocks*>(&model);
  if (!blocks) return;
  if (!blocks->sharding) {
    const auto group = sdk::Host::shard_group();
    if (!group) return;
    blocks->sharding = std::make_shared<nn::BlockShards>(
        group->rank, group->world_size,
        [](const at::Tensor& shard, const at::Tensor& out) { sdk::Host::shard_all_gather(shard, out); },
        nn::block_modules(model));
  }
  std::vector<std::string> names;
  names.reserve(weights.size());
  for (const auto& [name, t] : weights) names.push_back(name);
  blocks->sharding->loaded(names);
}

void check_block_sharding(torch::nn::Module& model, const std::string& component) {
  if (!sdk::Host::shard_group()) return;
  auto* blocks = dynamic_cast<nn::CheckpointedBlocks*>(&model);
  if (!blocks || !blocks->sharding || blocks->sharding->size() == 0)
    fail(YETO_ERR_UNSUPPORTED, "train.shard = \"fsdp\": the denoiser " + component +
                                   " has no block stacks to shard (a family's denoiser shards when it is an "
                                   "nn::CheckpointedBlocks whose blocks are the elements of its ModuleLists); use "
                                   "train.shard = \"ddp\"");
  if (const auto left = blocks->sharding->first_unsharded(); !left.empty())
    fail(YETO_ERR_INVALID_ARGUMENT, "train.shard = \"fsdp\": the denoiser " + component + "'s block " + left +
                                        " was not sharded: the checkpoint did not give all of its weights");
  sdk::Host::info("train.shard = fsdp: " + component + " keeps " + std::to_string(blocks->sharding->size()) +
                  " blocks as shards of " + std::to_string(blocks->sharding->shard_bytes() >> 10) + " KiB (of " +
                  std::to_string(blocks->sharding->full_bytes() >> 10) + " KiB) on rank " +
                  std::to_string(blocks->sharding->rank()) + " of " + std::to_string(blocks->sharding->world_size()) +
                  "; at most " + std::to_string(blocks->sharding->largest_unit_bytes() >> 10) +
                  " KiB of them whole at a time (one Linear weight, or a block's other parameters)");
}

namespace {
// One whole Linear weight from host memory to the compute device (block swap's "gather").
void copy_to_device(const at::Tensor& host, const at::Tensor& out) {
#if defined(YETO_HAVE_CUDA)
  if (out.is_cuda()) {
    // On a side stream, so the copy overlaps the GEMMs on the compute stream; the prefetch
    // thread waits for it, and the layer uses the buffer only after that.
    auto side = c10::cuda::getStreamFromPool(false, out.device().index());
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      out.copy_(host, /*non_blocking=*/true);
    }
    side.synchronize();
    return;
  }
#endif
  out.copy_(host);
}
}  // namespace

std::int64_t apply_block_swap(torch::nn::Module& model, const std::string& component, const at::Device& device) {
  const std::int64_t n = host_config_int("model.block_swap", 0);
  if (n == 0) return 0;
  if (n < 0) fail(YETO_ERR_INVALID_ARGUMENT, "model.block_swap must be 0 or a number of blocks, got " + std::to_string(n));
  if (device.is_cpu())
    fail(YETO_ERR_UNSUPPORTED,
         "model.block_swap = " + std::to_string(n) +
             " keeps blocks' frozen weights in host memory and copies each to the GPU just before it runs; this run "
             "computes on the CPU, where every block is in host memory already: set model.block_swap = 0 (or run on "
             "a CUDA device)");
  auto* blocks = dynamic_cast<nn::CheckpointedBlocks*>(&model);
  if (blocks && blocks->block_swap) return n;  // prepared before: its weights are in host memory already
  if (blocks && blocks->sharding)
    fail(YETO_ERR_UNSUPPORTED, "model.block_swap with train.shard = \"fsdp\": a rank keeps only its shard of each "
                               "block already; use one of the two (model.block_swap = 0, or train.shard = \"ddp\")");
  auto list = blocks ? nn::block_modules(model) : decltype(nn::block_modules(model)){};
  if (list.empty())
    fail(YETO_ERR_UNSUPPORTED, "model.block_swap: the denoiser " + component +
                                   " has no block stacks (an nn::CheckpointedBlocks whose blocks are the elements "
                                   "of its ModuleLists); set model.block_swap = 0");
  if (n > static_cast<std::int64_t>(list.size()))
    fail(YETO_ERR_INVALID_ARGUMENT, "model.block_swap = " + std::to_string(n) + ": the denoiser " + component +
                                        " has " + std::to_string(list.size()) + " blocks; use at most that many");
  list.erase(list.begin(), list.end() - n);
  const std::string first = list.front().first, last = list.back().first;
  nn::BlockShards::Options o;
  o.block_unit = false;
  o.device = device;
  o.pin = device.is_cuda();
  auto swap = std::make_shared<nn::BlockShards>(0, 1, copy_to_device, list, o);
  std::vector<std::string> names;
  for (const auto& [path, module] : list)
    for (const auto& p : module->named_parameters()) names.push_back(path + "." + p.key());
  swap->loaded(names);
  blocks->block_swap = swap;
  sdk::Host::info("model.block_swap = " + std::to_string(n) + ": " + component + " keeps the Linear weights of " +
                  first + " .. " + last + " (" + std::to_string(swap->shard_bytes() >> 20) +
                  " MiB) in host memory; each goes to " + device.str() + " for its GEMM and its input gradient, at "
                  "most " + std::to_string(swap->largest_unit_bytes() >> 20) + " MiB at a time, the next one prefetched");
  return n;
}

std::string parse_tuning(const json& options) {
  const auto tuning = options.value("tuning", std::string("lora"));
  if (tuning != "lora" && tuning != "full")
    fail(YETO_ERR_INVALID_ARGUMENT, "prepare: 'tuning' must be lora or full, got '" + tuning + "'");
  return tuning;
}

nn::LoraConfig parse_lora_config(const json& lora) {
  nn::LoraConfig cfg;
  try {
    cfg.r = lora.value("r", std::int64_t{16});
    cfg.alpha = lora.value("alpha", static_cast<double>(cfg.r));
    cfg.dropout = lora.value("dropout", 0.0);
    cfg.init = lora.value("init", std::string("kaiming"));
  } catch (const json::exception& e) {
    fail(YETO_ERR_INVALID_ARGUMENT, std::string("prepare: lora options (r, alpha, dropout, init): ") + e.what());
  }
  if (cfg.r <= 0) fail(YETO_ERR_INVALID_ARGUMENT, "prepare: lora.r must be positive");
  return cfg;
}

std::vector<std::string> prepare_tuning(torch::nn::Module& model, const std::string& tuning, const json& options,
                                        const TuningSpec& spec) {
  if (tuning == "full") {
    for (auto& p : model.parameters()) p.set_requires_grad(true);
    return {};
  }
  for (auto& p : model.parameters()) p.set_requires_grad(false);
  const json lora = options.contains("lora") && options["lora"].is_object() ? options["lora"] : json::object();
  const auto cfg = parse_lora_config(lora);
  LoraTargets targets;
  try {
    targets = spec.resolve_targets(lora.contains("targets") ? lora["targets"] : json("auto"));
  } catch (const std::invalid_argument& e) {
    fail(YETO_ERR_INVALID_ARGUMENT, e.what());
  }
  std::vector<std::string> patterns = targets.patterns;
  bool already = false;
  for (const auto& [path, layer] : nn::lora_capable_layers(model)) {
    if (targets.all_linear &&
        std::find(spec.all_linear_excludes.begin(), spec.all_linear_excludes.end(), path) ==
            spec.all_linear_excludes.end())
      patterns.push_back(path);
    already = already || layer->has_adapter(spec.adapter);
  }
  if (already) return {};  // prepared before: keep the adapter (and its trained values)
  auto gen = at::make_generator<at::CPUGeneratorImpl>(Host::api() ? Host::rng_seed(spec.seed_name) : 0);
  try {
    return nn::add_lora(model, patterns, cfg, spec.adapter, gen);
  } catch (const std::invalid_argument& e) {
    fail(YETO_ERR_INVALID_ARGUMENT, std::string("lora.targets: ") + e.what());
  }
}

NamedTensors trainable_parameters(const std::vector<NamedModule>& denoisers, const std::string& tuning,
                                  const std::string& adapter) {
  std::map<std::string, at::Tensor> sorted;
  for (const auto& d : denoisers) {
    if (tuning == "full") {
      for (const auto& p : d.module->named_parameters()) sorted.emplace(d.component + "." + p.key(), p.value());
      continue;
    }
    for (const auto& [path, layer] : nn::lora_capable_layers(*d.module)) {
      if (!layer->has_adapter(adapter)) continue;
      sorted.emplace(d.component + "." + path + ".lora_A.weight", layer->lora_A(adapter));
      sorted.emplace(d.component + "." + path + ".lora_B.weight", layer->lora_B(adapter));
    }
  }
  if (tuning != "full" && sorted.empty())
    fail(YETO_ERR_INVALID_ARGUMENT, "no LoRA adapter attached: call prepare() with lora options");
  NamedTensors out;
  for (auto& [name, t] : sorted) out.emplace_back(name, t);
  return out;
}

at::Tensor posterior_latent(const at::Tensor& mean, const at::Tensor& logvar, const json& options) {
  auto z = mean;
  if (options.value("sample", false)) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(options.value("seed", std::uint64_t{0}));
    const auto eps = at::randn(z.sizes(), gen, at::TensorOptions().dtype(at::kFloat)).to(z.device(), z.scalar_type());
    z = z + at::exp(0.5 * logvar) * eps;
  }
  return z;
}

const at::Tensor& image_pixels(const NamedTensors& media, const std::string& plugin, const std::string& model) {
  const auto& px = sdk::get(media, "pixel_values");
  if (px.dim() != 4 || px.size(1) != 3)
    fail(YETO_ERR_INVALID_ARGUMENT, plugin + " encode_media: 'pixel_values' must be an image batch [B, 3, H, W] in "
                                             "[-1, 1], got " + c10::str(px.sizes()) + " (" + model +
                                        " has no video VAE)");
  return px;
}

EncodedText encode_text(const std::vector<std::string>& prompts, const TextEncoderCall& c) {
  auto options = c.tokenize;
  options.max_length = c.max_length;
  const auto t = Host::tokenizer(c.tokenizer).tokenize(prompts, options);
  EncodedText e;
  e.encoder = c.encoder;
  e.input_ids = t.input_ids.to(at::kLong);
  e.attention_mask = t.attention_mask.to(at::kLong);
  e.outputs = Host::text_encoder(c.encoder).encode(e.input_ids, c.with_mask ? e.attention_mask : at::Tensor(),
                                                   c.hidden_states);
  return e;
}

at::Tensor EncodedText::output(const std::string& name) const {
  return family::output(outputs, name, encoder).to(at::kFloat);
}

void check_image_latents(const at::Tensor& x, const std::string& name, const std::string& plugin,
                         std::int64_t channels, std::int64_t patch_size) {
  if (x.dim() != 4 || x.size(1) != channels || x.size(2) % patch_size != 0 || x.size(3) % patch_size != 0)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, plugin + ": '" + name + "' must be latents [B, " + std::to_string(channels) +
                                             ", h, w] with h and w multiples of " + std::to_string(patch_size) +
                                             ", got " + c10::str(x.sizes()));
}

std::pair<at::Tensor, at::Tensor> same_layout_align(const at::Tensor& prediction, const at::Tensor& target,
                                                    const std::string& plugin) {
  if (prediction.sizes() != target.sizes())
    fail(YETO_ERR_INVALID_ARGUMENT, plugin + " align: prediction " + c10::str(prediction.sizes()) + " and target " +
                                        c10::str(target.sizes()) + " differ in shape");
  return {prediction.to(at::kFloat), target.to(at::kFloat)};
}

at::Tensor encode_with_host_vae(const at::Tensor& pixels, const std::string& options_json, double shift_factor,
                                double scaling_factor, const std::string& vae_component) {
  const auto o = parse_json(options_json, "encode_media options");
  const auto posterior = Host::vae(vae_component).encode(pixels);
  at::Tensor logvar;
  if (o.value("sample", false)) logvar = posterior.logvar.clamp(-30.0, 20.0);
  const auto z = posterior_latent(posterior.mean, logvar, o);
  return (z.to(at::kFloat) - shift_factor) * scaling_factor;
}

}  // namespace yeto::family
