// The plugin SDK with LibTorch: the hooks of a C++ plugin across the ABI (tinyden, the tests'
// plugin: a graph built inside the plugin backpropagates through a loss the host computes), the
// host API table (tensor handles, DLPack, config, RNG streams), and a plugin on the family kit
// built out of tree against an SDK installed into a temporary prefix (kit_consumer/).
#include <gtest/gtest.h>

#include <ATen/DLConvertor.h>
#include <torch/torch.h>

#include <memory>
#include <sstream>

#include "core/error.hpp"
#include "plugin/components.hpp"
#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"
#include "plugin_fixture.hpp"
#include "sdk_build.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "yeto/status.hpp"
#include "yeto/tensor.hpp"

using namespace yeto;
using namespace yeto::test;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

const yeto_host_api* test_host_api(const std::string& plugin) {
  plugin::HostApiOptions o;
  o.plugin_name = plugin;
  o.config_values = plugin::config_values(config::Config());
  o.seed = 7;
  return plugin::make_host_api(std::move(o));
}

plugin::NamedTensors only(const std::string& name, const at::Tensor& t) { return {{name, t}}; }

const at::Tensor& find(const plugin::NamedTensors& v, const std::string& name) {
  for (const auto& [n, t] : v)
    if (n == name) return t;
  throw std::runtime_error("missing " + name);
}

}  // namespace

TEST(PluginTorch, TheHooksOfACxxPluginCrossTheAbi) {
  const auto& p = plugin::load("tiny-denoiser", plugin::LoaderOptions::from_config(config::Config(), {fs::path(YETO_STAGE_DIR)}),
                               test_host_api("tinyden"));
  EXPECT_EQ(p.manifest.name, "tinyden");
  EXPECT_EQ(std::string(p.descriptor.torch_version), p.manifest.torch_version);
  EXPECT_EQ(p.descriptor.license_must_acknowledge, 0u);

  plugin::Instance inst(p, plugin::config_values(config::Config()).dump());

  // Component class registration: Diffusers _class_name -> constructor.
  plugin::ComponentRegistry registry;
  inst.register_components(registry);
  ASSERT_TRUE(registry.has("YetoTinyDenoiser"));
  EXPECT_EQ(registry.origin("YetoTinyDenoiser"), "plugin tinyden");
  {
    std::unique_ptr<const yeto_component_v1, plugin::ComponentDeleter> c(
        registry.create("YetoTinyDenoiser", R"({"in_channels": 3, "seed": 1})", ""));
    const auto out = plugin::component_forward(*c, {{"hidden_states", torch::randn({2, 3, 4, 4})},
                                                    {"timestep", torch::full({2}, 0.5)}});
    EXPECT_EQ(find(out, "sample").sizes(), (std::vector<int64_t>{2, 3, 4, 4}));
    std::vector<std::string> names;
    for (const auto& [n, t] : plugin::component_parameters(*c)) names.push_back(n);
    EXPECT_EQ(names, (std::vector<std::string>{"time_embed", "proj.weight", "proj.bias"}));
    // A plugin error crosses as a message, not a crash.
    try {
      plugin::component_forward(*c, {{"hidden_states", torch::randn({2, 3, 4, 4})}});
      FAIL();
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "no tensor named 'timestep'")) << e.what();
    }
  }
  try {
    registry.create("YetoTinyDenoizer", "{}", "");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_found);
    EXPECT_TRUE(contains(e.what(), "did you mean 'YetoTinyDenoiser'")) << e.what();
  }

  EXPECT_TRUE(contains(inst.load_pipeline("/models/tiny", "{}"), "YetoTinyDenoiser"));
  inst.prepare(R"({"in_channels": 4, "seed": 3})");

  // Trainable parameters: canonical names, deterministic order.
  const auto params = inst.trainable_parameters();
  std::vector<std::string> names;
  for (const auto& [n, t] : params) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"transformer.time_embed", "transformer.proj.weight",
                                             "transformer.proj.bias"}));
  std::vector<std::string> again;
  for (const auto& [n, t] : inst.trainable_parameters()) again.push_back(n);
  EXPECT_EQ(again, names);

  // One step the way the host's generic path runs it: the plugin contributes kwargs and
  // the forward; the host builds the noisy input and computes the loss, then backward.
  torch::manual_seed(11);
  const auto latents = torch::randn({2, 4, 3, 3});
  const auto noise = torch::randn({2, 4, 3, 3});
  const auto timesteps = torch::tensor({100, 900}, torch::kLong);
  const auto kwargs = inst.denoiser_kwargs(only("timesteps", timesteps), "{}");
  const auto& t = find(kwargs, "timestep");
  EXPECT_TRUE(torch::allclose(t, torch::tensor({0.1f, 0.9f})));
  const auto s = t.view({-1, 1, 1, 1});
  auto noisy = ((1 - s) * latents + s * noise).detach().requires_grad_(true);  // a host leaf
  const auto pred = inst.denoise({{"hidden_states", noisy}, {"timestep", t}}, "{}");
  ASSERT_TRUE(pred.defined());
  EXPECT_NE(pred.grad_fn(), nullptr) << "the plugin's graph must reach the host";
  const auto [ap, at_] = inst.align(pred, noise - latents, "{}");
  EXPECT_EQ(ap.dim(), 2);
  const auto loss = torch::mse_loss(ap, at_);  // computed in the host
  loss.backward();
  for (const auto& [n, w] : params) {
    ASSERT_TRUE(w.grad().defined()) << n << " got no gradient through the ABI";
    EXPECT_GT(w.grad().abs().sum().item<double>(), 0.0) << n;
  }
  ASSERT_TRUE(noisy.grad().defined());
  EXPECT_GT(noisy.grad().abs().sum().item<double>(), 0.0);

  // Artifacts round-trip through the plugin's own files.
  TempDir dir;
  const auto before = find(params, "transformer.proj.weight").detach().clone();
  inst.save_artifact(dir.path().string(), R"({"step": 5})");
  {
    torch::NoGradGuard ng;
    for (const auto& [n, w] : params) w.zero_();
  }
  EXPECT_EQ(inst.load_artifact(dir.path().string()), R"({"step": 5})");
  EXPECT_TRUE(torch::equal(find(params, "transformer.proj.weight"), before));

  // Hooks the plugin does not declare are refused by the host, not called.
  try {
    std::string metrics;
    inst.loss_step("[]", {}, metrics);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_available);
  }
}

TEST(PluginTorch, AStagedPluginIsSignedWithTheBuildKeyAndTrustedByDefault) {
  // What yeto-host run from the build tree sees: stage/plugins and stage/keys.
  const auto o = plugin::LoaderOptions::from_config(config::Config(), {fs::path(YETO_STAGE_DIR)});
  const auto& p = plugin::load("tinyden", o, test_host_api("tinyden"));
  EXPECT_EQ(p.provenance.key_fingerprint, sign::load_public_key(build_public_key()).fingerprint());
  EXPECT_EQ(p.provenance.library_path, (fs::path(YETO_STAGE_DIR) / "plugins/tinyden.so").lexically_normal().string());
}

TEST(PluginTorch, HostApiTensorsDlpackConfigAndRng) {
  const yeto_host_api* api = test_host_api("api-test");
  sdk::ErrorBuffer err;
  // A plain-C plugin makes tensors through the host API.
  TempDir tmp;
  copy_variant("cbasic", tmp.path());
  const auto& p = plugin::load("cbasic", options_for(tmp.path(), {build_public_key()}), api);
  plugin::Instance inst(p, "{}");
  const auto params = inst.trainable_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "c.weight");
  EXPECT_TRUE(torch::equal(params[0].second, torch::tensor({1.0f, 2.0f, 3.0f})));

  // Handles: info, copy out, retain/release keep one TensorImpl.
  const auto x = torch::arange(6, torch::kFloat).reshape({2, 3}).requires_grad_(true);
  const auto h = reinterpret_cast<yeto_tensor>(x.unsafeGetTensorImpl());
  yeto_tensor_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(api->tensor_info(api->host, h, &info, err.get()), YETO_OK) << err.message();
  EXPECT_EQ(info.dtype, YETO_DTYPE_F32);
  EXPECT_EQ(info.ndim, 2);
  EXPECT_EQ(info.shape[1], 3);
  EXPECT_EQ(info.requires_grad, 1u);
  float out[6] = {};
  ASSERT_EQ(api->tensor_copy_to(api->host, h, out, sizeof out, err.get()), YETO_OK);
  EXPECT_EQ(out[5], 5.0f);
  EXPECT_EQ(api->tensor_copy_to(api->host, h, out, 4, err.get()), YETO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message(), "buffer is 4 bytes")) << err.message();
  const auto before = x.use_count();
  yeto_tensor r = nullptr;
  ASSERT_EQ(api->tensor_retain(api->host, h, &r, err.get()), YETO_OK);
  EXPECT_EQ(x.use_count(), before + 1);
  api->tensor_release(api->host, r);
  EXPECT_EQ(x.use_count(), before);

  // DLPack: export is zero-copy, import takes ownership.
  DLManagedTensor* dl = nullptr;
  ASSERT_EQ(api->tensor_to_dlpack(api->host, h, &dl, err.get()), YETO_OK);
  EXPECT_EQ(dl->dl_tensor.ndim, 2);
  EXPECT_EQ(dl->dl_tensor.data, x.data_ptr());
  yeto_tensor back = nullptr;
  ASSERT_EQ(api->tensor_from_dlpack(api->host, dl, &back, err.get()), YETO_OK);
  const at::Tensor y = sdk::adopt(back);
  EXPECT_EQ(y.data_ptr(), x.data_ptr());
  EXPECT_FALSE(y.requires_grad());

  // Config values as JSON.
  std::string text;
  yeto_text_out sink{sizeof(yeto_text_out), YETO_ABI_VERSION, &text,
                     [](void* c, const char* d, size_t n) { static_cast<std::string*>(c)->append(d, n); }};
  ASSERT_EQ(api->config_get(api->host, "lora.r", &sink, err.get()), YETO_OK) << err.message();
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(api->config_get(api->host, "no.such_key", &sink, err.get()), YETO_ERR_NOT_FOUND);

  // Named RNG streams: deterministic per name, different across names.
  yeto_rng a = nullptr, b = nullptr, c = nullptr;
  ASSERT_EQ(api->rng_create(api->host, "noise", &a, err.get()), YETO_OK);
  ASSERT_EQ(api->rng_create(api->host, "noise", &b, err.get()), YETO_OK);
  ASSERT_EQ(api->rng_create(api->host, "timesteps", &c, err.get()), YETO_OK);
  EXPECT_EQ(api->rng_seed(api->host, a), api->rng_seed(api->host, b));
  EXPECT_NE(api->rng_seed(api->host, a), api->rng_seed(api->host, c));
  EXPECT_EQ(api->rng_next_u64(api->host, a), api->rng_next_u64(api->host, b));
  EXPECT_NE(api->rng_next_u64(api->host, a), api->rng_next_u64(api->host, c));
  for (auto g : {a, b, c}) api->rng_release(api->host, g);
  EXPECT_NE(plugin::stream_seed(7, 0, "x"), plugin::stream_seed(7, 1, "x"));
  // Per logical rank, except the LoRA initialisation, which every island and rank shares.
  {
    plugin::HostApiOptions o1;
    o1.plugin_name = "api-test";
    o1.seed = 7;
    o1.logical_rank = 3;
    const yeto_host_api* ranked = plugin::make_host_api(o1);
    yeto_rng r0 = nullptr, r3 = nullptr, l0 = nullptr, l3 = nullptr;
    ASSERT_EQ(api->rng_create(api->host, "noise", &r0, err.get()), YETO_OK);
    ASSERT_EQ(ranked->rng_create(ranked->host, "noise", &r3, err.get()), YETO_OK);
    ASSERT_EQ(api->rng_create(api->host, "lora_init", &l0, err.get()), YETO_OK);
    ASSERT_EQ(ranked->rng_create(ranked->host, "lora_init", &l3, err.get()), YETO_OK);
    EXPECT_NE(api->rng_seed(api->host, r0), ranked->rng_seed(ranked->host, r3));
    EXPECT_EQ(api->rng_seed(api->host, l0), ranked->rng_seed(ranked->host, l3));
    for (auto g : {r0, l0}) api->rng_release(api->host, g);
    for (auto g : {r3, l3}) ranked->rng_release(ranked->host, g);
  }
  EXPECT_NE(plugin::stream_seed(7, 0, "x"), plugin::stream_seed(8, 0, "x"));

  // Undeclared hooks are NULL in the table (cbasic declares only "trainable").
  EXPECT_EQ(p.table.denoise, nullptr);
  EXPECT_THROW(inst.denoise({}, "{}"), Error);
}

namespace {

// A pipeline stand-in: one component "weights" whose parameters are `w`.
struct OneComponent : plugin::ComponentSource {
  explicit OneComponent(at::Tensor w) : weight(std::move(w)) {
    table.struct_size = sizeof table;
    table.abi_version = YETO_ABI_VERSION;
    table.self = this;
    table.class_name = "TestWeights";
    table.parameters = [](void* self, const yeto_named_tensors_out* out, yeto_error*) -> yeto_status {
      return out->push(out->context, "weight", sdk::to_handle(static_cast<OneComponent*>(self)->weight));
    };
  }
  const yeto_component_v1* find_component(const std::string& name) const override {
    return name == "weights" ? &table : nullptr;
  }
  std::vector<std::string> component_names() const override { return {"weights"}; }
  at::Tensor weight;
  yeto_component_v1 table{};
};

}  // namespace

TEST(PluginTorch, ComponentGetAnswersFromTheBoundPipeline) {
  const yeto_host_api* api = test_host_api("cpresets");
  ASSERT_TRUE(YETO_HAS_FIELD(yeto_host_api, api, component_get));
  sdk::ErrorBuffer err;
  const yeto_component_v1* c = nullptr;
  // Before any pipeline is bound.
  EXPECT_EQ(api->component_get(api->host, "weights", &c, err.get()), YETO_ERR_NOT_FOUND);
  EXPECT_TRUE(contains(err.message(), "no pipeline is loaded")) << err.message();

  OneComponent first(torch::tensor({4.0f, 5.0f}));
  plugin::HostApiOptions o;
  o.plugin_name = "cpresets";
  o.pipeline = &first;
  plugin::bind_host_api(api, o);
  ASSERT_EQ(api->component_get(api->host, "weights", &c, err.get()), YETO_OK) << err.message();
  EXPECT_EQ(c, &first.table);
  EXPECT_EQ(api->component_get(api->host, "weight", &c, err.get()), YETO_ERR_NOT_FOUND);
  EXPECT_EQ(c, nullptr);
  EXPECT_TRUE(contains(err.message(), "did you mean 'weights'")) << err.message();
  EXPECT_TRUE(contains(err.message(), "it has: weights")) << err.message();

  // ABI 1.2 typed services: a component without one is refused naming its class, a missing one
  // as component_get refuses it, and a table of 1.1's size is never read past its end.
  ASSERT_TRUE(YETO_HAS_FIELD(yeto_host_api, api, scheduler_get));
  const yeto_vae_service* vae = nullptr;
  EXPECT_EQ(api->vae_get(api->host, "weights", &vae, err.get()), YETO_ERR_UNSUPPORTED);
  EXPECT_EQ(vae, nullptr);
  EXPECT_TRUE(contains(err.message(), "TestWeights, which offers no VAE service")) << err.message();
  const yeto_scheduler_service* sched = nullptr;
  EXPECT_EQ(api->scheduler_get(api->host, "weight", &sched, err.get()), YETO_ERR_NOT_FOUND);
  EXPECT_TRUE(contains(err.message(), "did you mean 'weights'")) << err.message();
  yeto_vae_service fake{};
  first.table.vae = &fake;
  first.table.struct_size = static_cast<uint32_t>(offsetof(yeto_component_v1, vae));
  EXPECT_EQ(api->vae_get(api->host, "weights", &vae, err.get()), YETO_ERR_UNSUPPORTED);
  first.table.struct_size = sizeof first.table;
  ASSERT_EQ(api->vae_get(api->host, "weights", &vae, err.get()), YETO_OK) << err.message();
  EXPECT_EQ(vae, &fake);
  first.table.vae = nullptr;

  // The plugin side: cpresets hands the pipeline component's parameters back as trainable.
  TempDir tmp;
  copy_variant("cpresets", tmp.path());
  const auto& p = plugin::load("cpresets", options_for(tmp.path(), {build_public_key()}), api);
  EXPECT_EQ(p.host_api, api);
  // Built against ABI 1.1, loaded by this (newer minor) host.
  EXPECT_EQ(YETO_ABI_MINOR(p.table.abi_version), 1u);
  EXPECT_EQ(YETO_ABI_MINOR(api->abi_version), YETO_ABI_VERSION_MINOR);
  plugin::Instance inst(p, "{}");
  auto params = inst.trainable_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[0].second.data_ptr(), first.weight.data_ptr());
  EXPECT_TRUE(contains(inst.presets(), "\"tiny\"")) << inst.presets();

  // A second pipeline of the same plugin rebinds the table the plugin holds; closing it
  // restores the first.
  OneComponent second(torch::tensor({7.0f}));
  o.pipeline = &second;
  plugin::bind_host_api(api, o);
  params = inst.trainable_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].second.data_ptr(), second.weight.data_ptr());
  plugin::unbind_host_api(api, &second);
  EXPECT_EQ(inst.trainable_parameters()[0].second.data_ptr(), first.weight.data_ptr());
  plugin::unbind_host_api(api, &first);
  try {
    inst.trainable_parameters();
    FAIL() << "component_get answered without a pipeline";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "no pipeline is loaded")) << e.what();
  }

  // An ABI 1.0 plugin has no presets hook: the host says so instead of calling NULL.
  copy_variant("cv10", tmp.path());
  const auto& old = plugin::load("cv10", options_for(tmp.path(), {build_public_key()}), api);
  plugin::Instance old_inst(old, "{}");
  try {
    old_inst.presets();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_available);
    EXPECT_TRUE(contains(e.what(), "ABI 1.0")) << e.what();
  }
  EXPECT_EQ(old_inst.trainable_parameters()[0].first, "c.weight");
}

TEST(PluginTorch, AFamilyKitPluginBuiltOutOfTreeExportsOnlyItsEntryAndTrainsLora) {
  const InstalledSdk sdk = install_sdk(YETO_OOT_DIR);
  if (HasFatalFailure()) return;
  // The kit is installed: headers of both components and the package's kit targets.
  EXPECT_TRUE(fs::exists(sdk.prefix / "include/yeto/nn/linear.hpp"));
  EXPECT_TRUE(fs::exists(sdk.prefix / "include/yeto/family/family.hpp"));
  EXPECT_TRUE(fs::exists(sdk.prefix / "lib/cmake/YetoSDK/YetoSDKKitTargets.cmake"));
  EXPECT_TRUE(fs::exists(sdk.prefix / "lib/libyeto_nn.a"));
  EXPECT_TRUE(fs::exists(sdk.prefix / "lib/libyeto_family.a"));
  const fs::path plugins = build_against(sdk, fs::path(YETO_SOURCE_DIR) / "tests/plugin/kit_consumer", "build-kit");
  const fs::path so = plugins / "kitprobe.so";
  ASSERT_TRUE(fs::exists(so));

  // The kit's code is linked in but stays internal: of Yeto's own symbols only the entry point
  // is exported.
  const auto ours = own_exported_symbols(so);
  ASSERT_EQ(ours.size(), 1u) << "exported symbols of ours:\n" << [&] {
    std::string all;
    for (const auto& sym : ours) all += "  " + sym + "\n";
    return all;
  }();
  EXPECT_TRUE(contains(ours[0], " T yeto_plugin_entry")) << ours[0];

  // It loads with the publisher's key and its kit-made LoRA trains.
  const auto& p = plugin::load("kitprobe", options_for(plugins, {sdk.public_key}), test_host_api("kitprobe"));
  plugin::Instance inst(p, plugin::config_values(config::Config()).dump());
  plugin::ComponentRegistry registry;
  inst.register_components(registry);
  EXPECT_TRUE(registry.has("KitProbeModel"));
  inst.prepare(R"({"channels": 3, "lora": {"r": 2, "alpha": 4}})");
  const auto params = inst.trainable_parameters();
  std::vector<std::string> names;
  for (const auto& [n, t] : params) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"transformer.proj_in.lora_A.weight", "transformer.proj_in.lora_B.weight"}));
  EXPECT_EQ(find(params, "transformer.proj_in.lora_A.weight").sizes(), (std::vector<int64_t>{2, 3}));
  const auto x = torch::randn({5, 3});
  const auto loss = inst.denoise({{"hidden_states", x}}, "{}").pow(2).mean();
  loss.backward();
  // PEFT's init: B = 0, so A gets no gradient on the first step and B does.
  EXPECT_TRUE(find(params, "transformer.proj_in.lora_B.weight").grad().defined());
  EXPECT_GT(find(params, "transformer.proj_in.lora_B.weight").grad().abs().sum().item<double>(), 0.0);
  // The run configuration reaches the plugin at create: without lora options, prepare takes the
  // run's lora.r.
  {
    config::Config cfg = config::Config::resolve(std::nullopt, {{"lora.r", "5", "test"}});
    plugin::Instance configured(p, plugin::config_values(cfg).dump());
    configured.prepare(R"({"channels": 3})");
    EXPECT_EQ(find(configured.trainable_parameters(), "transformer.proj_in.lora_A.weight").sizes(),
              (std::vector<int64_t>{5, 3}));
  }
  // A kit error crosses the ABI with the kit's message.
  try {
    inst.prepare(R"({"channels": 3, "tuning": "half"})");
    FAIL() << "a bad tuning was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'tuning' must be lora or full, got 'half'")) << e.what();
  }
}

TEST(PluginTorch, TheCExampleBuiltOutOfTreeMakesItsTensorThroughTheHost) {
  const InstalledSdk sdk = install_sdk(std::string(YETO_OOT_DIR) + "-c");
  if (HasFatalFailure()) return;
  const fs::path plugins = build_against(sdk, sdk.prefix / "share/yeto/sdk/examples/c-plugin", "build",
                                         {"-DCMAKE_C_FLAGS=-Wall -Wextra -Werror"});
  if (HasFatalFailure()) return;
  const auto ours = own_exported_symbols(plugins / "cexample.so");
  ASSERT_EQ(ours.size(), 1u);
  EXPECT_TRUE(contains(ours[0], " T yeto_plugin_entry")) << ours[0];

  const auto& p = plugin::load("cexample", options_for(plugins, {sdk.public_key}), test_host_api("cexample"));
  EXPECT_EQ(std::string(p.descriptor.torch_version), "");
  config::Config cfg = config::Config::resolve(std::nullopt, {{"lora.alpha", "32", "test"}});
  plugin::Instance inst(p, plugin::config_values(cfg).dump());
  const auto params = inst.trainable_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "example.weight");
  const auto& w = params[0].second;
  EXPECT_EQ(w.sizes(), (std::vector<int64_t>{4}));
  EXPECT_EQ(w.scalar_type(), torch::kFloat);
  EXPECT_LE(w.abs().max().item<double>(), 2.0) << w;  // alpha 32 / 16
  EXPECT_GT(w.abs().sum().item<double>(), 0.0) << w;
  // The host's "example_init" stream: the same run seed gives the same tensor.
  plugin::Instance again(p, plugin::config_values(cfg).dump());
  EXPECT_TRUE(torch::equal(again.trainable_parameters()[0].second, w));
  // Hooks it does not declare are refused by the host.
  try {
    inst.denoise({}, "{}");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_available) << e.what();
  }
}
