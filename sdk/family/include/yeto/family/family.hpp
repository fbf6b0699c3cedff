// The plugin half of the family kit (yeto_family): the pieces every Diffusers family plugin
// written on yeto/plugin.hpp repeats, with one owner. JSON options and host configuration, calls
// into the host's components (VAE, text encoders, tokenizers, scheduler), device/precision
// placement, loading checkpoint tensors into a module by Diffusers name, LoRA / full tuning of
// one or more named denoisers with PEFT-style trainable names, and VAE latent encoding with an
// optional seeded posterior sample. Every error is a yeto::sdk::Failure whose message names the
// option, key, component or tensor. Include it only in plugins (it pulls in yeto/plugin.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <nlohmann/json.hpp>

#include <yeto/plugin.hpp>

#include "yeto/family/config.hpp"
#include "yeto/nn/checkpoint.hpp"
#include "yeto/nn/linear.hpp"

namespace yeto::family {

using sdk::NamedTensors;

// ---- JSON and host configuration ------------------------------------------------------------

// Parses `text`; invalid JSON fails YETO_ERR_INVALID_ARGUMENT "<what>: invalid JSON: ...".
nlohmann::json parse_json(const std::string& text, const std::string& what);
// The bytes of a file; a missing one fails YETO_ERR_NOT_FOUND "<path>: cannot open".
std::string read_text_file(const std::string& path);
// parse_json(read_text_file(path), path).
nlohmann::json read_json_file(const std::string& path);
// Python's bare -Infinity / Infinity / NaN outside strings (as Diffusers writes some configs,
// e.g. DPM-Solver's "lambda_min_clipped": -Infinity) replaced by null, so the text parses.
std::string python_nonfinite_to_null(const std::string& text);

// A run-configuration value from the host (null when there is no host, no config_get or no key).
nlohmann::json host_config(const std::string& key);
std::string host_config_string(const std::string& key, const std::string& fallback);
std::int64_t host_config_int(const std::string& key, std::int64_t fallback);

// The run's activation checkpointing: train.activation_checkpointing (off without a host) and
// train.activation_checkpointing_every (1 when unset; below 1 fails YETO_ERR_INVALID_ARGUMENT
// "train.activation_checkpointing_every must be at least 1, got <n>").
nn::BlockCheckpointing run_block_checkpointing();
// Sets `policy` on a denoiser whose blocks honour one (an nn::CheckpointedBlocks) and returns
// true; false for any other module.
bool set_block_checkpointing(torch::nn::Module& model, const nn::BlockCheckpointing& policy);

// encode_conditioning's prompts: a non-empty JSON array of strings ("encode_conditioning: expected
// a JSON array of prompts", "encode_conditioning: every prompt must be a string").
std::vector<std::string> conditioning_prompts(const nlohmann::json& prompts);

// ---- placement --------------------------------------------------------------------------------

// "bf16" -> kBFloat16, "fp16" -> kHalf, anything else kFloat.
at::ScalarType dtype_of(const std::string& precision);
// "auto" or empty: cuda:0 when CUDA is available, else CPU; otherwise a device name, refused
// with "device: '<name>' is not a device name (cpu, cuda, cuda:N)".
at::Device device_of(const std::string& device);

// Where a denoiser lives and in which dtype: `device` through device_of, `precision` through
// resolve_precision on that device (its errors name `key`; std::invalid_argument) and dtype_of.
struct Placement {
  at::Device device;
  at::ScalarType dtype;
};
Placement placement(const std::string& device, const std::string& precision, const std::string& key = "precision");
// The run's placement from the host configuration (run.device, model.precision; "auto" without a
// host): what a component the host builds should use.
Placement run_placement(const std::string& key = "precision");
// prepare's placement from its options ("device", "precision"; "auto" when absent).
Placement prepare_placement(const nlohmann::json& options, const std::string& key = "precision");

// ---- host components ------------------------------------------------------------------------

// The output tensor `name` of a call; a missing one fails "<component> returned no '<name>' tensor".
const at::Tensor& output(const NamedTensors& out, const std::string& name, const std::string& component);

// A batch of prompts through the host's tokenizer and text encoder services: tokenized with
// `tokenize` (padding to max_length and truncation unless it says otherwise; its max_length is
// this call's), then encoded from the ids (and, with_mask, the tokenizer's attention mask);
// hidden_states: the encoder also returns every "hidden_states.<i>".
struct TextEncoderCall {
  std::string tokenizer = "tokenizer";
  std::string encoder = "text_encoder";
  std::int64_t max_length = 77;
  bool with_mask = false;
  sdk::TokenizeOptions tokenize = {};
  bool hidden_states = false;
};
struct EncodedText {
  at::Tensor input_ids;       // [B, max_length] int64
  at::Tensor attention_mask;  // [B, max_length] int64
  NamedTensors outputs;       // the encoder's: last_hidden_state, pooler_output, text_embeds, ...
  std::string encoder;
  // An encoder output as float32; a missing one fails "<encoder> returned no '<name>' tensor".
  at::Tensor output(const std::string& name) const;
};
EncodedText encode_text(const std::vector<std::string>& prompts, const TextEncoderCall& call);

// ---- component classes built on a torch::nn::Module --------------------------------------

// Puts a component's model where the run wants it (run_placement) in eval mode. Built directly in
// the run's precision and device, a 16-bit checkpoint the host streams in never has a float32
// copy of the whole model.
void place_for_run(torch::nn::Module& model);

// A plugin component class's model from its config.json text (`dir` empty: the plan's config):
// Model(Cfg::from_json(config)), placed for the run. Invalid JSON, and a std::invalid_argument of
// from_json or of the model's constructor, fail naming "<dir>/config.json" (or "<cls> config").
template <class Model, class Cfg>
Model component_model(const std::string& config_json, const std::string& dir, const std::string& cls) {
  const std::string where = dir.empty() ? cls + " config" : dir + "/config.json";
  Model model{nullptr};
  try {
    model = Model(Cfg::from_json(parse_json(config_json, where)));
  } catch (const std::invalid_argument& e) {
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": " + e.what());
  }
  place_for_run(*model);
  return model;
}

// The plugin's own implementation behind the pipeline component `name`: an `Impl` the plugin
// registered as class `cls`. Anything else (another class, a host-built component) fails
// "the pipeline's <name> is <class>, not <article> <cls> built by the <plugin> plugin".
template <class Impl>
Impl& plugin_component(const std::string& name, const std::string& cls, const std::string& plugin,
                       const std::string& article = "a") {
  const auto c = sdk::Host::component(name);
  auto* impl = c.as<Impl>(cls);
  if (!impl)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "the pipeline's " + name + " is " + c.class_name() + ", not " + article + " " +
                                             cls + " built by the " + plugin + " plugin");
  return *impl;
}

// The model of plugin_component<Impl>(...): what a family's typed accessor returns.
template <class Impl>
auto& plugin_model(const std::string& name, const std::string& cls, const std::string& plugin,
                   const std::string& article = "a") {
  return plugin_component<Impl>(name, cls, plugin, article).model();
}

// Every parameter, then (with_buffers) every buffer, by Diffusers name: a Component's parameters().
NamedTensors module_tensors(torch::nn::Module& model, bool with_buffers = true);
// A Component's load_weights(): each tensor becomes the parameter (or, with_buffers, buffer) of
// that name — the tensor itself when dtype and device match (the caller hands it over and does not
// write to it afterwards), else a converting copy; shapes must match ("<cls> tensor '<name>': checkpoint shape ..., model shape ...").
// A name the module lacks fails "<cls> has no parameter '<name>' (<hint>)" when strict, else is skipped.
void load_module_weights(torch::nn::Module& model, const NamedTensors& weights, bool strict, const std::string& cls,
                         const std::string& hint, bool with_buffers = true);

// train.shard = "fsdp" (the host's shard_group answers): called by load_module_weights after each
// batch of `weights` a denoiser (an nn::CheckpointedBlocks) took; the first call gives it its
// nn::BlockShards over nn::block_modules(model), and every block whose weights have all loaded is
// sharded at once, so no rank holds more than a block's whole weights while loading. A no-op
// for other modules and runs.
void shard_loaded_blocks(torch::nn::Module& model, const NamedTensors& weights);
// At prepare, under fsdp: fails naming `component` when the denoiser has no block stacks to
// shard, or a block whose weights did not all load; logs the shard sizes.
void check_block_sharding(torch::nn::Module& model, const std::string& component);
// model.block_swap = N (> 0), at prepare before the denoiser moves to `device`: the Linear
// weights of its last N blocks (nn::block_modules order) stay in host memory (page-locked on
// CUDA) and each is copied to `device` for its GEMM and again for its input gradient, the next
// one prefetched (on CUDA on a side stream). Refused naming the key: a CPU device (the blocks
// are in host memory already, there is nothing to swap), fsdp, a denoiser without block stacks,
// N above its block count. Logs what stays in host memory. Returns N.
std::int64_t apply_block_swap(torch::nn::Module& model, const std::string& component, const at::Device& device);

// A plugin component class implemented by a torch::nn::Module: what the kit (DiffusersFamily's
// tuning, trainables) reaches through the component of any class the plugin registered.
class ModuleComponent : public sdk::Component {
 public:
  virtual torch::nn::Module& module() = 0;
};

// The Diffusers class of a ModelComponent: its name (errors, "<name> config"), the hint a load
// error ends with ("is this a FLUX.1 transformer checkpoint?"), and whether checkpoint tensors
// may name buffers too (parameters() always lists both).
struct ModelClass {
  std::string name;
  std::string hint;
  bool with_buffers = true;
};

// A component class built on Model(Cfg::from_json(config)): the config (Python's bare
// -Infinity / NaN read as null) through component_model, parameters() and load_weights() by
// Diffusers name. The family writes forward() (and the typed accessors its hooks use).
template <class Model, class Cfg>
class ModelComponent : public ModuleComponent {
 public:
  ModelComponent(const std::string& config_json, const std::string& dir, ModelClass cls)
      : model_(component_model<Model, Cfg>(python_nonfinite_to_null(config_json), dir, cls.name)),
        class_(std::move(cls)) {}

  NamedTensors parameters() override { return module_tensors(*model_); }
  // Streams are welcome: the host may call this once per tensor. Strict loading refuses names
  // the model does not have; shapes must always match (completeness is the caller's check).
  void load_weights(const NamedTensors& weights, bool strict) override {
    load_module_weights(*model_, weights, strict, class_.name, class_.hint, class_.with_buffers);
  }
  torch::nn::Module& module() override { return *model_; }
  Model& model() { return model_; }

 protected:
  Model model_;

 private:
  ModelClass class_;
};

// The module behind the pipeline component `name` when the plugin built it (a ModuleComponent),
// else fails "the pipeline's <name> is <class>, not a model built by the <plugin> plugin".
torch::nn::Module& plugin_module(const std::string& name, const std::string& plugin);

// ---- tuning: LoRA or full, over named denoisers ---------------------------------------------

// A denoiser the run trains: its component name (the first part of every trainable name) and module.
struct NamedModule {
  std::string component;
  torch::nn::Module* module = nullptr;
};

// prepare's "tuning" option: "lora" (default) or "full"; anything else fails
// "prepare: 'tuning' must be lora or full, got '...'".
std::string parse_tuning(const nlohmann::json& options);

// prepare's "lora" object (r 16, alpha = r, dropout 0, init kaiming); a wrong type fails
// "prepare: lora options (r, alpha, dropout, init): ...", r <= 0 "prepare: lora.r must be positive".
nn::LoraConfig parse_lora_config(const nlohmann::json& lora);

// How a family resolves `lora.targets` (throws std::invalid_argument with its message).
using TargetResolver = std::function<LoraTargets(const nlohmann::json& targets)>;

// What prepare does with one denoiser after placing it. "full": every parameter trains. "lora":
// every base parameter is frozen; then, unless the module already carries `adapter` (prepared
// before: the adapter keeps its trained values), the adapter is added to the resolved targets
// (all-linear: every LoRA-capable layer except the paths in all_linear_excludes), seeded from
// the host's rng_seed(seed_name) (0 without a host). Targets that match nothing fail
// "lora.targets: ...". Returns the layer paths that received the adapter now.
struct TuningSpec {
  TargetResolver resolve_targets;
  std::vector<std::string> all_linear_excludes = {"proj_out"};
  std::string adapter = "default";
  std::string seed_name = "lora_init";
};
std::vector<std::string> prepare_tuning(torch::nn::Module& model, const std::string& tuning,
                                        const nlohmann::json& options, const TuningSpec& spec);

// The trainable tensors of the denoisers in canonical order (sorted by name): with "full" tuning
// "<component>.<parameter>", with LoRA "<component>.<layer path>.lora_A.weight" / ".lora_B.weight"
// (PEFT's names). LoRA without any adapter attached fails
// "no LoRA adapter attached: call prepare() with lora options".
NamedTensors trainable_parameters(const std::vector<NamedModule>& denoisers, const std::string& tuning,
                                  const std::string& adapter = "default");

// ---- generate --------------------------------------------------------------------------------

// The trace of a generate call (request "trace": true): named intermediate tensors, recorded as
// detached copies in call order; record(name, t) does nothing when the trace is off.
class Trace {
 public:
  explicit Trace(bool on) : on_(on) {}
  void operator()(const std::string& name, const at::Tensor& t) {
    if (on_) items_.emplace_back(name, t.detach().clone());
  }
  // Moves the recorded tensors to the end of `out` (the hook's outputs come first).
  void append_to(NamedTensors& out) {
    for (auto& nt : items_) out.push_back(std::move(nt));
    items_.clear();
  }
  // What generate returns: `outputs`, then the recorded tensors.
  NamedTensors outputs(NamedTensors outputs) {
    append_to(outputs);
    return outputs;
  }

 private:
  bool on_;
  NamedTensors items_;
};

// The trace of one generate() call that also keeps autograd off while it lives (sampling never
// records a graph): what a family's generate starts with.
class GenerationTrace : public Trace {
 public:
  explicit GenerationTrace(bool on) : Trace(on) {}

 private:
  at::NoGradGuard no_grad_;
};

// ---- latents ---------------------------------------------------------------------------------

// The latent of a diagonal-Gaussian VAE posterior: the mean, or with encode_media options
// {"sample": true, "seed": s} mean + exp(logvar / 2) * eps, eps drawn in float32 from a CPU
// generator seeded with s (0 by default), as torch.Generator("cpu").manual_seed(s) would.
at::Tensor posterior_latent(const at::Tensor& mean, const at::Tensor& logvar, const nlohmann::json& options);

// encode_media's "pixel_values" of an image-only family: [B, 3, H, W], refused otherwise with
// "<plugin> encode_media: 'pixel_values' must be an image batch [B, 3, H, W] in [-1, 1], got
// <shape> (<model> has no video VAE)".
const at::Tensor& image_pixels(const NamedTensors& media, const std::string& plugin, const std::string& model);

// encode_media for an image VAE the host serves (AutoencoderKL): `options_json` parsed as
// "encode_media options", `vae_component`'s encode on `pixels`, the posterior latent (logvar
// clamped to [-30, 20] as DiagonalGaussianDistribution does), then (z - shift) * scale in float32.
at::Tensor encode_with_host_vae(const at::Tensor& pixels, const std::string& options_json, double shift_factor,
                                double scaling_factor, const std::string& vae_component = "vae");

// An image DiT's latents input `name` (denoise, denoiser_kwargs): [B, channels, h, w] with h and w
// multiples of `patch_size`, else fails "<plugin>: '<name>' must be latents [B, <channels>, h, w]
// with h and w multiples of <patch_size>, got <shape>".
void check_image_latents(const at::Tensor& x, const std::string& name, const std::string& plugin,
                         std::int64_t channels, std::int64_t patch_size);

// align() of a family whose prediction and target share one layout: both as float32, refused
// with "<plugin> align: prediction <shape> and target <shape> differ in shape" otherwise.
std::pair<at::Tensor, at::Tensor> same_layout_align(const at::Tensor& prediction, const at::Tensor& target,
                                                    const std::string& plugin);

}  // namespace yeto::family
