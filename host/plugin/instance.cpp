#include "plugin/instance.hpp"

#include "core/error.hpp"
#include "yeto/status.hpp"
#include "yeto/tensor.hpp"

namespace yeto::plugin {
namespace {

// A borrowed handle of `t` for one call (NULL for an undefined tensor), and the owned tensor of
// a handle a call returned (undefined for NULL).
yeto_tensor borrowed_handle(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<yeto_tensor>(t.unsafeGetTensorImpl()) : nullptr;
}
at::Tensor take(yeto_tensor t) { return t ? sdk::adopt(t) : at::Tensor(); }

// Borrowed C views of named tensors; the NamedTensors keep them alive for the call.
struct CInputs {
  std::vector<const char*> names;
  std::vector<yeto_tensor> tensors;
  yeto_named_tensors view{};
  explicit CInputs(const NamedTensors& in) {
    for (const auto& [n, t] : in) {
      names.push_back(n.c_str());
      tensors.push_back(borrowed_handle(t));
    }
    view.struct_size = sizeof view;
    view.abi_version = YETO_ABI_VERSION;
    view.count = in.size();
    view.names = names.data();
    view.tensors = tensors.data();
  }
};

struct COutputs {
  NamedTensors tensors;
  yeto_named_tensors_out sink{};
  COutputs() {
    sink.struct_size = sizeof sink;
    sink.abi_version = YETO_ABI_VERSION;
    sink.context = this;
    sink.push = [](void* ctx, const char* name, yeto_tensor t) -> yeto_status {
      at::Tensor owned = sdk::adopt(t);  // owned in every case
      if (!name) return YETO_ERR_INVALID_ARGUMENT;
      static_cast<COutputs*>(ctx)->tensors.emplace_back(name, std::move(owned));
      return YETO_OK;
    };
  }
};

struct CText {
  std::string text;
  yeto_text_out sink{};
  CText() {
    sink.struct_size = sizeof sink;
    sink.abi_version = YETO_ABI_VERSION;
    sink.context = &text;
    sink.write = [](void* ctx, const char* d, size_t n) { static_cast<std::string*>(ctx)->append(d, n); };
  }
};

void check(yeto_status s, sdk::ErrorBuffer& err, const std::string& plugin, const char* hook) {
  if (s == YETO_OK) return;
  throw Error("plugin '" + plugin + "' " + hook + " failed (" + sdk::status_name(s) + "): " + err.message(),
              s == YETO_ERR_INVALID_ARGUMENT ? ExitCode::bad_input : ExitCode::failure);
}

}  // namespace

#define YETO_REQUIRE_HOOK(hook)                                                                             \
  if (!plugin_.table.hook)                                                                                  \
    throw Error("plugin '" + plugin_.manifest.name + "' does not implement " #hook                         \
                " (it does not declare that capability)", ExitCode::not_available)

Instance::Instance(const LoadedPlugin& plugin, const std::string& config_json) : plugin_(plugin) {
  sdk::ErrorBuffer err;
  check(plugin_.table.create(config_json.c_str(), &instance_, err.get()), err, plugin_.manifest.name, "create");
}

Instance::~Instance() {
  if (instance_ && plugin_.table.destroy) plugin_.table.destroy(instance_);
}

void Instance::register_components(ComponentRegistry& registry) {
  YETO_REQUIRE_HOOK(register_components);
  sdk::ErrorBuffer err;
  check(plugin_.table.register_components(instance_, registry.c_registry("plugin " + plugin_.manifest.name), err.get()),
        err, plugin_.manifest.name, "register_components");
}

std::string Instance::load_pipeline(const std::string& model_dir, const std::string& model_index_json) {
  YETO_REQUIRE_HOOK(load_pipeline);
  sdk::ErrorBuffer err;
  CText plan;
  check(plugin_.table.load_pipeline(instance_, model_dir.c_str(), model_index_json.c_str(), &plan.sink, err.get()), err,
        plugin_.manifest.name, "load_pipeline");
  return plan.text;
}

void Instance::prepare(const std::string& options_json) {
  YETO_REQUIRE_HOOK(prepare);
  sdk::ErrorBuffer err;
  check(plugin_.table.prepare(instance_, options_json.c_str(), err.get()), err, plugin_.manifest.name, "prepare");
}

NamedTensors Instance::trainable_parameters() {
  YETO_REQUIRE_HOOK(trainable_parameters);
  sdk::ErrorBuffer err;
  COutputs out;
  check(plugin_.table.trainable_parameters(instance_, &out.sink, err.get()), err, plugin_.manifest.name,
        "trainable_parameters");
  return std::move(out.tensors);
}

NamedTensors Instance::encode_media(const NamedTensors& media, const std::string& options_json) {
  YETO_REQUIRE_HOOK(encode_media);
  sdk::ErrorBuffer err;
  CInputs in(media);
  COutputs out;
  check(plugin_.table.encode_media(instance_, &in.view, options_json.c_str(), &out.sink, err.get()), err,
        plugin_.manifest.name, "encode_media");
  return std::move(out.tensors);
}

NamedTensors Instance::encode_conditioning(const std::string& prompts_json, const NamedTensors& extra) {
  YETO_REQUIRE_HOOK(encode_conditioning);
  sdk::ErrorBuffer err;
  CInputs in(extra);
  COutputs out;
  check(plugin_.table.encode_conditioning(instance_, prompts_json.c_str(), &in.view, &out.sink, err.get()), err,
        plugin_.manifest.name, "encode_conditioning");
  return std::move(out.tensors);
}

NamedTensors Instance::denoiser_kwargs(const NamedTensors& batch, const std::string& step_json) {
  YETO_REQUIRE_HOOK(denoiser_kwargs);
  sdk::ErrorBuffer err;
  CInputs in(batch);
  COutputs out;
  check(plugin_.table.denoiser_kwargs(instance_, &in.view, step_json.c_str(), &out.sink, err.get()), err,
        plugin_.manifest.name, "denoiser_kwargs");
  return std::move(out.tensors);
}

at::Tensor Instance::denoise(const NamedTensors& inputs, const std::string& step_json) {
  YETO_REQUIRE_HOOK(denoise);
  sdk::ErrorBuffer err;
  CInputs in(inputs);
  yeto_tensor pred = nullptr;
  check(plugin_.table.denoise(instance_, &in.view, step_json.c_str(), &pred, err.get()), err, plugin_.manifest.name,
        "denoise");
  return sdk::adopt(pred);
}

std::pair<at::Tensor, at::Tensor> Instance::align(const at::Tensor& prediction, const at::Tensor& target,
                                                  const std::string& step_json) {
  YETO_REQUIRE_HOOK(align);
  sdk::ErrorBuffer err;
  yeto_tensor p = nullptr, t = nullptr;
  check(plugin_.table.align(instance_, reinterpret_cast<yeto_tensor>(prediction.unsafeGetTensorImpl()),
                            reinterpret_cast<yeto_tensor>(target.unsafeGetTensorImpl()), step_json.c_str(), &p, &t,
                            err.get()),
        err, plugin_.manifest.name, "align");
  return {sdk::adopt(p), sdk::adopt(t)};
}

at::Tensor Instance::loss_step(const std::string& rows_json, const NamedTensors& batch, std::string& metrics_json) {
  YETO_REQUIRE_HOOK(loss_step);
  sdk::ErrorBuffer err;
  CInputs in(batch);
  CText metrics;
  yeto_tensor loss = nullptr;
  check(plugin_.table.loss_step(instance_, rows_json.c_str(), &in.view, &loss, &metrics.sink, err.get()), err,
        plugin_.manifest.name, "loss_step");
  metrics_json = metrics.text;
  return sdk::adopt(loss);
}

void Instance::save_artifact(const std::string& dir, const std::string& metadata_json) {
  YETO_REQUIRE_HOOK(save_artifact);
  sdk::ErrorBuffer err;
  check(plugin_.table.save_artifact(instance_, dir.c_str(), metadata_json.c_str(), err.get()), err,
        plugin_.manifest.name, "save_artifact");
}

std::string Instance::load_artifact(const std::string& dir) {
  YETO_REQUIRE_HOOK(load_artifact);
  sdk::ErrorBuffer err;
  CText meta;
  check(plugin_.table.load_artifact(instance_, dir.c_str(), &meta.sink, err.get()), err, plugin_.manifest.name,
        "load_artifact");
  return meta.text;
}

NamedTensors Instance::generate(const std::string& request_json, const NamedTensors& inputs) {
  YETO_REQUIRE_HOOK(generate);
  sdk::ErrorBuffer err;
  CInputs in(inputs);
  COutputs out;
  check(plugin_.table.generate(instance_, request_json.c_str(), &in.view, &out.sink, err.get()), err,
        plugin_.manifest.name, "generate");
  return std::move(out.tensors);
}

std::string Instance::presets() {
  if (!plugin_.table.presets)
    throw Error("plugin '" + plugin_.manifest.name + "' offers no init-model presets (it " +
                    (YETO_HAS_FIELD(yeto_plugin_v1, &plugin_.table, presets)
                         ? std::string("does not declare the 'presets' capability")
                         : "was built against plugin ABI 1.0, which has no presets hook; rebuild it against this SDK") +
                    ")",
                ExitCode::not_available);
  sdk::ErrorBuffer err;
  CText out;
  check(plugin_.table.presets(instance_, &out.sink, err.get()), err, plugin_.manifest.name, "presets");
  return out.text;
}

NamedTensors component_forward(const yeto_component_v1& c, const NamedTensors& inputs, const std::string& options) {
  sdk::ErrorBuffer err;
  CInputs in(inputs);
  COutputs out;
  const yeto_status s = c.forward(c.self, &in.view, options.c_str(), &out.sink, err.get());
  if (s != YETO_OK) throw Error(std::string("component ") + c.class_name + " forward failed: " + err.message());
  return std::move(out.tensors);
}

NamedTensors component_parameters(const yeto_component_v1& c) {
  sdk::ErrorBuffer err;
  COutputs out;
  const yeto_status s = c.parameters(c.self, &out.sink, err.get());
  if (s != YETO_OK) throw Error(std::string("component ") + c.class_name + " parameters failed: " + err.message());
  return std::move(out.tensors);
}

const yeto_vae_service* component_vae(const yeto_component_v1& c) {
  return static_cast<size_t>(c.struct_size) >= offsetof(yeto_component_v1, vae) + sizeof c.vae ? c.vae : nullptr;
}

namespace {
const yeto_vae_service& need_vae(const yeto_component_v1& c) {
  const auto* v = component_vae(c);
  if (!v) throw Error(std::string("component ") + c.class_name + " offers no VAE service", ExitCode::not_available);
  return *v;
}
}  // namespace

std::pair<at::Tensor, at::Tensor> vae_encode(const yeto_component_v1& c, const at::Tensor& pixels) {
  const auto& v = need_vae(c);
  sdk::ErrorBuffer err;
  yeto_tensor mean = nullptr, logvar = nullptr;
  const yeto_status s = v.encode(v.self, borrowed_handle(pixels), 0u, &mean, &logvar, err.get());
  std::pair<at::Tensor, at::Tensor> out{take(mean), take(logvar)};
  if (s != YETO_OK) throw Error(std::string("component ") + c.class_name + " encode failed: " + err.message());
  return out;
}

at::Tensor vae_decode(const yeto_component_v1& c, const at::Tensor& latents, const NamedTensors& extra) {
  const auto& v = need_vae(c);
  sdk::ErrorBuffer err;
  CInputs in(extra);
  yeto_tensor sample = nullptr;
  const yeto_status s = v.decode(v.self, borrowed_handle(latents), &in.view, 0u, &sample, err.get());
  at::Tensor out = take(sample);
  if (s != YETO_OK) throw Error(std::string("component ") + c.class_name + " decode failed: " + err.message());
  return out;
}

void component_load_weights(const yeto_component_v1& c, const NamedTensors& weights, const std::string& options) {
  sdk::ErrorBuffer err;
  CInputs in(weights);
  const yeto_status s = c.load_weights(c.self, &in.view, options.c_str(), err.get());
  if (s != YETO_OK)
    throw Error(std::string("component ") + c.class_name + " load_weights failed (" + sdk::status_name(s) +
                    "): " + err.message(),
                s == YETO_ERR_INVALID_ARGUMENT || s == YETO_ERR_NOT_FOUND ? ExitCode::bad_input : ExitCode::failure);
}

}  // namespace yeto::plugin
