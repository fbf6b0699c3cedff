// Pipeline::open end to end on small Diffusers directories the tests write: a plugin
// denoiser (tinyden's, or the probe plugin's) next to the host's VAE, CLIP text encoder,
// tokenizer and scheduler copied from the flux-tiny fixture. Checks that weights really land
// (against the safetensors files), that bf16 checkpoints stream in bf16, that the plugin
// reaches the host components through component_get, and the errors a user can cause.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "core/error.hpp"
#include "io/component_registry.hpp"
#include "io/provenance.hpp"
#include "io/repository.hpp"
#include "io/tensors.hpp"
#include "models/model_components.hpp"
#include "pipeline/host_components.hpp"
#include "pipeline/pipeline.hpp"
#include "plugin/components.hpp"
#include "plugin/instance.hpp"
#include "plugin/loader.hpp"
#include "schedulers/scheduler.hpp"
#include "support/temp_dir.hpp"
#include "yeto/status.hpp"
#include "yeto/tensor.hpp"

using namespace yeto;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kFluxTiny = fs::path(YETO_TEST_FIXTURES) / "repos" / "flux-tiny";

bool contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

void write_json(const fs::path& p, const json& j) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << j.dump(2);
}

// A Diffusers directory: a 4-channel denoiser of `denoiser_class` with weights in `dtype`,
// plus the flux-tiny VAE, CLIP text encoder, CLIP tokenizer and scheduler folders.
fs::path write_model(const fs::path& dir, const std::string& denoiser_class, at::ScalarType dtype,
                     bool tinyden_layout) {
  json index = {{"_class_name", "YetoTestPipeline"},
                {"_diffusers_version", "0.33.1"},
                {"transformer", {"yeto", denoiser_class}},
                {"vae", {"diffusers", "AutoencoderKL"}},
                {"text_encoder", {"transformers", "CLIPTextModel"}},
                {"tokenizer", {"transformers", "CLIPTokenizer"}},
                {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}}};
  write_json(dir / "model_index.json", index);
  write_json(dir / "transformer" / "config.json", {{"_class_name", denoiser_class}, {"in_channels", 4}});
  torch::manual_seed(5);
  std::vector<std::pair<std::string, at::Tensor>> w = {{"proj.weight", torch::randn({4, 4}).to(dtype)},
                                                       {"proj.bias", torch::randn({4}).to(dtype)}};
  if (tinyden_layout) w.emplace_back("time_embed", torch::randn({4}).to(dtype));
  io::save_safetensors(dir / "transformer" / "diffusion_pytorch_model.safetensors", w);
  for (const char* c : {"vae", "text_encoder", "tokenizer", "scheduler"})
    fs::copy(kFluxTiny / c, dir / c, fs::copy_options::recursive);
  return dir;
}

std::vector<config::Override> base_overrides(const fs::path& model, const std::string& adapter,
                                             const std::vector<fs::path>& plugin_dirs) {
  std::string dirs = "[";
  for (const auto& d : plugin_dirs) dirs += std::string(dirs.size() > 1 ? ", " : "") + "\"" + d.string() + "\"";
  dirs += "]";
  return {{"model.id", model.string(), "test"},
          {"model.adapter", adapter, "test"},
          {"plugins.dirs", dirs, "test"},
          {"plugins.trusted_keys", "[\"" + std::string(YETO_BUILD_KEY_PUBLIC) + "\"]", "test"},
          {"run.device", "cpu", "test"}};
}

config::Config make_config(std::vector<config::Override> o, const std::vector<config::Override>& extra = {}) {
  o.insert(o.end(), extra.begin(), extra.end());
  return config::Config::resolve(std::nullopt, o);
}

std::map<std::string, at::Tensor> params_of(const yeto_component_v1* c) {
  std::map<std::string, at::Tensor> out;
  for (auto& [n, t] : plugin::component_parameters(*c)) out[n] = t;
  return out;
}

const at::Tensor& find(const plugin::NamedTensors& v, const std::string& name) {
  for (const auto& [n, t] : v)
    if (n == name) return t;
  throw std::runtime_error("no output named " + name);
}

class PipelineTest : public ::testing::Test {
 protected:
  fs::path stage_plugins() const { return fs::path(YETO_STAGE_DIR) / "plugins"; }
  fs::path probe_plugins() const { return fs::path(YETO_PROBE_PLUGIN_DIR); }
  test::TempDir tmp_;
};

}  // namespace

// First in this file: nothing has loaded the probe plugin yet.
TEST_F(PipelineTest, InspectSeesTheFamilyPluginsClasses) {
  const fs::path model = write_model(tmp_.path() / "inspect", "YetoProbeDenoiser", at::kFloat, false);
  auto& reg = plugin::ComponentRegistry::global();
  ASSERT_FALSE(reg.has("YetoProbeDenoiser"));
  const auto repo = io::DiffusersRepo::open(model);
  // The run names no plugin and none is installed that serves the model: nothing is loaded.
  pipeline::load_model_classes(config::Config(), repo);
  EXPECT_FALSE(reg.has("YetoProbeDenoiser"));
  const auto cfg = make_config(base_overrides(model, "pipeprobe", {probe_plugins()}));
  pipeline::load_model_classes(cfg, repo);
  ASSERT_TRUE(reg.has("YetoProbeDenoiser"));
  EXPECT_EQ(reg.kind("YetoProbeDenoiser"), "denoiser");
  EXPECT_EQ(reg.origin("YetoProbeDenoiser"), "plugin pipeprobe");
  // The one registry constructs the class through the plugin, and the host's classes through the
  // same C table.
  plugin::ComponentPtr c(reg.create("YetoProbeDenoiser", R"({"in_channels": 3})", ""));
  EXPECT_EQ(params_of(c.get()).at("proj.weight").sizes(), (std::vector<int64_t>{3, 3}));
  pipeline::ensure_builtin_components();
  EXPECT_EQ(reg.origin("FlowMatchEulerDiscreteScheduler"), "host");
  EXPECT_EQ(reg.kind("FlowMatchEulerDiscreteScheduler"), "scheduler");
  const auto read = [](const fs::path& f) { return json::parse(std::ifstream(f)).dump(); };
  plugin::ComponentPtr sched(
      reg.create("FlowMatchEulerDiscreteScheduler", read(kFluxTiny / "scheduler" / "scheduler_config.json"),
                 (kFluxTiny / "scheduler").string()));
  ASSERT_NE(sched->scheduler, nullptr);
  EXPECT_NE(pipeline::host_component_of(sched.get()), nullptr);
}

TEST_F(PipelineTest, TinyDenModelOpensWithEveryComponentAndItsWeights) {
  const fs::path model = write_model(tmp_.path() / "tiny", "YetoTinyDenoiser", at::kFloat, true);
  const auto cfg = make_config(base_overrides(model, "tinyden", {stage_plugins()}));
  auto p = pipeline::Pipeline::open(cfg);
  EXPECT_EQ(p->loaded_plugin().manifest.name, "tinyden");
  EXPECT_EQ(p->model_dir(), model);
  EXPECT_EQ(p->model_id(), model.string());
  EXPECT_EQ(p->model_commit(), "");
  EXPECT_EQ(p->component_names(),
            (std::vector<std::string>{"scheduler", "text_encoder", "tokenizer", "transformer", "vae"}));
  EXPECT_EQ(p->denoisers(), std::vector<std::string>{"transformer"});
  EXPECT_EQ(p->component("unet"), nullptr);
  EXPECT_EQ(p->plan()["components"]["transformer"]["class"], "YetoTinyDenoiser");

  // The plugin's class, streamed from its folder: every tensor equals the file's.
  const auto file = io::load_safetensors(model / "transformer" / "diffusion_pytorch_model.safetensors");
  const auto denoiser = params_of(p->component("transformer"));
  ASSERT_EQ(denoiser.size(), 3u);
  for (const auto& [n, t] : file) {
    ASSERT_TRUE(denoiser.count(n)) << n;
    EXPECT_EQ(denoiser.at(n).scalar_type(), at::kFloat) << n;
    EXPECT_TRUE(torch::equal(denoiser.at(n), t)) << n;
  }
  // A host class, built natively: its weights are the fixture's too.
  const auto vae_file = io::load_safetensors(kFluxTiny / "vae" / "diffusion_pytorch_model.safetensors");
  const auto vae = params_of(p->component("vae"));
  ASSERT_TRUE(vae.count("encoder.conv_in.weight"));
  EXPECT_TRUE(torch::equal(vae.at("encoder.conv_in.weight"), vae_file.at("encoder.conv_in.weight")));
  EXPECT_EQ(std::string(p->component("vae")->class_name), "AutoencoderKL");
  ASSERT_NE(pipeline::host_component_of(p->component("vae")), nullptr);

  // The training scheduler is the repository's.
  ASSERT_NE(p->scheduler(), nullptr);
  EXPECT_EQ(p->scheduler()->num_train_timesteps(), 1000);

  // The plugin instance is prepared and trains on it (tinyden makes its own denoiser).
  EXPECT_EQ(p->plugin().trainable_parameters().size(), 3u);

  // Hashes: one per component, stable, and they change with a weight file.
  const auto h = p->component_hashes();
  EXPECT_EQ(h.size(), 5u);
  EXPECT_EQ(h.at("vae").size(), 64u);
  EXPECT_EQ(p->component_hashes(), h);
  EXPECT_NE(h.at("vae"), h.at("text_encoder"));

  io::Provenance prov;
  p->record_provenance(prov);
  const json pj = prov.to_json();
  ASSERT_TRUE(pj.contains("extra") && pj.at("extra").contains("model_components")) << pj.dump();
  const json& mc = pj.at("extra").at("model_components");
  EXPECT_EQ(mc.at("transformer").at("origin"), "plugin tinyden");
  EXPECT_EQ(mc.at("transformer").at("class"), "YetoTinyDenoiser");
  EXPECT_EQ(mc.at("vae").at("origin"), "host");
  EXPECT_EQ(mc.at("vae").at("sha256"), h.at("vae"));
  EXPECT_TRUE(pj.at("extra").contains("plugin_trust")) << pj.dump();
  ASSERT_FALSE(prov.sources().empty());
  EXPECT_EQ(prov.sources()[0].role, "model");

  // Host classes through the plugin's host API (component_create): a T5 encoder and its
  // tokenizer from the flux-tiny fixture, owned by the caller.
  const yeto_host_api* api = p->loaded_plugin().host_api;
  ASSERT_NE(api, nullptr);
  sdk::ErrorBuffer err;
  const auto read = [](const fs::path& f) { return json::parse(std::ifstream(f)).dump(); };
  const yeto_component_v1* t5 = nullptr;
  const yeto_component_v1* tok = nullptr;
  ASSERT_EQ(api->component_create(api->host, "T5EncoderModel", read(kFluxTiny / "text_encoder_2" / "config.json").c_str(),
                                  (kFluxTiny / "text_encoder_2").c_str(), &t5, err.get()),
            YETO_OK)
      << err.message();
  ASSERT_EQ(api->component_create(api->host, "T5TokenizerFast", "{}", (kFluxTiny / "tokenizer_2").c_str(), &tok,
                                  err.get()),
            YETO_OK)
      << err.message();
  std::unique_ptr<const yeto_component_v1, plugin::ComponentDeleter> t5_owner(t5), tok_owner(tok);
  // Their tables carry the typed service of their kind and no other.
  EXPECT_NE(t5->text_encoder, nullptr);
  EXPECT_EQ(t5->vae, nullptr);
  ASSERT_NE(tok->tokenizer, nullptr);
  EXPECT_EQ(tok->scheduler, nullptr);
  {
    const char* text[] = {"a tiny cat"};
    yeto_tokenize_options o{sizeof(yeto_tokenize_options), YETO_ABI_VERSION, 16, YETO_PADDING_MAX_LENGTH,
                            YETO_CLEAN_NONE, 1, 1};
    yeto_tensor typed_ids = nullptr, typed_mask = nullptr;
    ASSERT_EQ(tok->tokenizer->tokenize(tok->tokenizer->self, 1, text, &o, &typed_ids, &typed_mask, err.get()), YETO_OK)
        << err.message();
    const at::Tensor typed = sdk::adopt(typed_ids);
    sdk::release(typed_mask);
    EXPECT_TRUE(torch::equal(
        typed, find(plugin::component_forward(*tok, {}, R"({"text": ["a tiny cat"], "max_length": 16})"), "input_ids")));
    o.padding = 7;
    EXPECT_EQ(tok->tokenizer->tokenize(tok->tokenizer->self, 1, text, &o, &typed_ids, &typed_mask, err.get()),
              YETO_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(err.message(), "unknown padding 7")) << err.message();
  }
  const auto ids = plugin::component_forward(*tok, {}, R"({"text": ["a tiny cat"], "max_length": 16})");
  EXPECT_EQ(find(ids, "input_ids").sizes(), (std::vector<int64_t>{1, 16}));
  const auto t5_out = plugin::component_forward(*t5, {{"input_ids", find(ids, "input_ids")}}, "{}");
  EXPECT_EQ(find(t5_out, "last_hidden_state").size(1), 16);
  const auto t5_file = io::load_safetensors(kFluxTiny / "text_encoder_2" / "model-00001-of-00002.safetensors");
  const auto t5_params = params_of(t5);
  std::size_t compared = 0;
  for (const auto& [n, t] : t5_file)
    if (t5_params.count(n)) compared += torch::equal(t5_params.at(n), t) ? 1 : 0;
  EXPECT_GT(compared, 0u);
  EXPECT_EQ(api->component_create(api->host, "NoSuchEncoder", "{}", nullptr, &t5, err.get()), YETO_ERR_NOT_FOUND);

  // The plugin's class is in the one registry under the plan's kind, next to the host's own.
  EXPECT_EQ(plugin::ComponentRegistry::global().kind("YetoTinyDenoiser"), "denoiser");
  EXPECT_EQ(plugin::ComponentRegistry::global().kind("AutoencoderKL"), "vae");
  EXPECT_EQ(plugin::ComponentRegistry::global().origin("AutoencoderKL"), "host");
}

TEST_F(PipelineTest, Bf16CheckpointStreamsInTheRunPrecision) {
  const fs::path model = write_model(tmp_.path() / "bf16", "YetoTinyDenoiser", at::kBFloat16, true);
  const auto file = io::load_safetensors(model / "transformer" / "diffusion_pytorch_model.safetensors");
  ASSERT_EQ(file.at("proj.weight").scalar_type(), at::kBFloat16);
  {
    auto p = pipeline::Pipeline::open(
        make_config(base_overrides(model, "tinyden", {stage_plugins()}), {{"model.precision", "bf16", "test"}}));
    const auto w = params_of(p->component("transformer"));
    for (const auto& [n, t] : file) {
      EXPECT_EQ(w.at(n).scalar_type(), at::kBFloat16) << n;
      EXPECT_TRUE(torch::equal(w.at(n), t)) << n;
    }
    // Host modules run in the same precision.
    EXPECT_EQ(params_of(p->component("vae")).at("encoder.conv_in.weight").scalar_type(), at::kBFloat16);
  }
  // auto on the CPU is float32: the bf16 values, widened exactly.
  auto p = pipeline::Pipeline::open(make_config(base_overrides(model, "tinyden", {stage_plugins()})));
  const auto w = params_of(p->component("transformer"));
  EXPECT_EQ(w.at("proj.weight").scalar_type(), at::kFloat);
  EXPECT_TRUE(torch::equal(w.at("proj.weight"), file.at("proj.weight").to(at::kFloat)));
}

TEST_F(PipelineTest, PluginReachesHostComponentsThroughComponentGet) {
  const fs::path model = write_model(tmp_.path() / "probe", "YetoProbeDenoiser", at::kFloat, false);
  const auto cfg = make_config(base_overrides(model, "pipeprobe", {probe_plugins()}),
                               {{"lora.r", "4", "test"}, {"lora.targets", "attention", "test"}});
  auto p = pipeline::Pipeline::open(cfg);
  auto& inst = p->plugin();

  // prepare() got the run's options and found its own denoiser object behind the component.
  const json seen = json::parse(inst.load_artifact(tmp_.path().string()));
  EXPECT_EQ(seen["prepare"]["lora"]["r"], 4);
  EXPECT_EQ(seen["prepare"]["lora"]["targets"], "attention");
  EXPECT_EQ(seen["prepare"]["tuning"], "lora");
  EXPECT_EQ(seen["prepare"]["precision"], "fp32");
  EXPECT_EQ(seen["prepare"]["device"], "cpu");
  EXPECT_EQ(seen["own"], true);
  EXPECT_EQ(seen["foreign_is_own"], false);
  EXPECT_EQ(seen["seen"], json({"transformer", "vae", "text_encoder", "tokenizer", "scheduler"}));

  // The plugin's own object holds the weights the host streamed in.
  const auto x = torch::randn({2, 4});
  const auto own = inst.generate(R"({"op": "own"})", {{"hidden_states", x}});
  const auto file = io::load_safetensors(model / "transformer" / "diffusion_pytorch_model.safetensors");
  EXPECT_TRUE(torch::equal(find(own, "proj.weight"), file.at("proj.weight")));
  EXPECT_TRUE(torch::allclose(find(own, "sample"), torch::addmm(file.at("proj.bias"), x, file.at("proj.weight").t())));

  // VAE encode and decode: the typed service (ABI 1.2) and the ABI 1.1 JSON form give the host
  // module's own results.
  const auto pixels = torch::rand({1, 3, 16, 16}) * 2 - 1;
  auto host_vae = std::dynamic_pointer_cast<models::AutoencoderKLComponent>(pipeline::host_component_of(p->component("vae")));
  ASSERT_NE(host_vae, nullptr);
  torch::NoGradGuard no_grad;
  const auto direct = host_vae->vae->encode(pixels);
  const auto enc = inst.generate(R"({"op": "encode"})", {{"pixel_values", pixels}});
  const auto enc_json = inst.generate(R"({"op": "encode", "form": "json"})", {{"pixel_values", pixels}});
  EXPECT_EQ(find(enc, "mean").sizes(), (std::vector<int64_t>{1, 16, 2, 2}));
  EXPECT_TRUE(torch::equal(find(enc, "mean"), direct.mean));
  EXPECT_TRUE(torch::equal(find(enc, "logvar"), direct.logvar));
  EXPECT_TRUE(torch::equal(find(enc_json, "mean"), direct.mean));
  EXPECT_FALSE(find(enc, "mean").requires_grad());  // frozen: no graph unless asked for
  const auto dec = inst.generate(R"({"op": "decode"})", {{"latents", direct.mean}});
  const auto dec_json = inst.generate(R"({"op": "decode", "form": "json"})", {{"latents", direct.mean}});
  EXPECT_EQ(find(dec, "sample").sizes(), pixels.sizes());
  EXPECT_TRUE(torch::equal(find(dec, "sample"), host_vae->vae->decode(direct.mean)));
  EXPECT_TRUE(torch::equal(find(dec_json, "sample"), find(dec, "sample")));

  // Tokenizer, then text encoder with hidden states, in both forms.
  for (const char* form : {"typed", "json"}) {
    SCOPED_TRACE(form);
    const auto text = inst.generate(
        json{{"op", "text"}, {"form", form}, {"prompts", {"a cat", "a photo of a dog"}}}.dump(), {});
    EXPECT_EQ(find(text, "input_ids").sizes(), (std::vector<int64_t>{2, 77}));
    EXPECT_EQ(find(text, "input_ids").scalar_type(), at::kLong);
    EXPECT_EQ(find(text, "attention_mask").sum().item<int64_t>() > 0, true);
    EXPECT_EQ(find(text, "last_hidden_state").sizes(), (std::vector<int64_t>{2, 77, 24}));
    EXPECT_EQ(find(text, "pooler_output").sizes(), (std::vector<int64_t>{2, 24}));
    EXPECT_TRUE(find(text, "hidden_states.0").defined());
    EXPECT_TRUE(find(text, "hidden_states.2").defined());  // 2 layers: embeddings + 2
  }
  const auto text = inst.generate(R"({"op": "text", "prompts": ["a cat"]})", {});
  const auto text_json = inst.generate(R"({"op": "text", "form": "json", "prompts": ["a cat"]})", {});
  EXPECT_TRUE(torch::equal(find(text, "input_ids"), find(text_json, "input_ids")));
  EXPECT_TRUE(torch::equal(find(text, "last_hidden_state"), find(text_json, "last_hidden_state")));

  // Scheduler timesteps match the C++ scheduler's own; one step is the scheduler's step.
  const auto sched = inst.generate(R"({"op": "schedule", "steps": 4})", {});
  EXPECT_EQ(find(sched, "timesteps").numel(), 4);
  EXPECT_TRUE(torch::equal(find(sched, "timesteps"), p->scheduler()->timesteps()));
  EXPECT_EQ(find(sched, "sigmas").numel(), 5);
  EXPECT_EQ(find(sched, "sigmas").scalar_type(), at::kFloat);
  const auto sched_json = inst.generate(R"({"op": "schedule", "form": "json", "steps": 4})", {});
  EXPECT_TRUE(torch::equal(find(sched_json, "timesteps"), find(sched, "timesteps")));
  const auto model_output = torch::randn({1, 16, 2, 2}), sample = torch::randn({1, 16, 2, 2});
  const auto stepped = inst.generate(R"({"op": "step"})", {{"model_output", model_output}, {"sample", sample}});
  const auto stepped_json =
      inst.generate(R"({"op": "step", "form": "json"})", {{"model_output", model_output}, {"sample", sample}});
  const auto sigmas = p->scheduler()->sigmas();
  EXPECT_TRUE(torch::allclose(find(stepped, "prev_sample"),
                              sample + (sigmas[1] - sigmas[0]).to(at::kFloat) * model_output));  // Euler
  EXPECT_TRUE(torch::equal(find(stepped_json, "prev_sample"), find(stepped, "prev_sample")));

  // A service of the wrong kind: UNSUPPORTED naming the component's class.
  try {
    inst.generate(R"({"op": "wrong_kind"})", {{"latents", direct.mean}});
    FAIL() << "the transformer offered a VAE service";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "vae_get(transformer)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "YetoProbeDenoiser, which offers no VAE service")) << e.what();
  }

  // A component the pipeline lacks: NOT_FOUND with the names it has.
  try {
    inst.generate(R"({"op": "missing"})", {});
    FAIL() << "component_get found a component that does not exist";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "no_such_component")) << e.what();
    EXPECT_TRUE(contains(e.what(), "it has: scheduler, text_encoder, tokenizer, transformer, vae")) << e.what();
  }
  // Host methods check their inputs and names.
  try {
    plugin::component_forward(*p->component("vae"), {{"latents", pixels}}, R"({"method": "encdoe"})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "did you mean 'encode'")) << e.what();
  }
  try {
    plugin::component_forward(*p->component("vae"), {}, R"({"method": "encode"})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "needs input tensor 'sample'")) << e.what();
  }
  // The typed VAE service through the host's own helpers (check-parity's route).
  EXPECT_NE(plugin::component_vae(*p->component("vae")), nullptr);
  EXPECT_EQ(plugin::component_vae(*p->component("transformer")), nullptr);
  EXPECT_TRUE(torch::equal(plugin::vae_encode(*p->component("vae"), pixels).first, direct.mean));
  try {
    plugin::vae_decode(*p->component("vae"), direct.mean, {{"temb", torch::zeros({1})}});
    FAIL() << "AutoencoderKL took a temb";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "takes no 'temb' tensor")) << e.what();
  }

  // Presets (ABI 1.1) through the SDK's C++ glue.
  const json presets = json::parse(inst.presets());
  EXPECT_EQ(presets["probe-tiny"]["components"]["transformer"]["config"]["in_channels"], 4);

  // A second pipeline of the same plugin in this process: the plugin's host table is
  // rebound to it, and back to the first when it closes.
  {
    const fs::path other = write_model(tmp_.path() / "probe2", "YetoProbeDenoiser", at::kFloat, false);
    auto q = pipeline::Pipeline::open(make_config(base_overrides(other, "pipeprobe", {probe_plugins()})));
    const auto w2 = io::load_safetensors(other / "transformer" / "diffusion_pytorch_model.safetensors");
    EXPECT_TRUE(torch::equal(find(q->plugin().generate(R"({"op": "own"})", {{"hidden_states", x}}), "proj.weight"),
                             w2.at("proj.weight")));
  }
  const auto again = inst.generate(R"({"op": "encode"})", {{"pixel_values", pixels}});
  EXPECT_TRUE(torch::equal(find(again, "mean"), direct.mean));
}

// LTX-2's audio VAE and vocoder as host components behind the C ABI (what a family plugin
// reaches through component_get): the pipeline's latent helpers, decode and vocode compose into
// the recorded mel and waveform of the parity cases.
TEST(HostAudioComponents, AudioVaeAndVocoderMethods) {
  pipeline::ensure_builtin_components();
  const fs::path parity = fs::path(YETO_TEST_FIXTURES) / "parity";
  auto make = [&](const std::string& name, const std::string& cls) {
    std::ifstream in(parity / name / "config.json");
    io::ComponentSource src{cls, parity / name, json::parse(in), ""};
    return pipeline::wrap_host_component(io::ComponentRegistry::global().create(src));
  };
  const plugin::ComponentPtr vae_table(make("ltx2-audio-vae", "AutoencoderKLLTX2Audio"));
  const plugin::ComponentPtr voc_table(make("ltx2-vocoder", "LTX2Vocoder"));
  const auto* vae = vae_table.get();
  const auto* voc = voc_table.get();
  const auto in = io::load_safetensors(parity / "ltx2-audio-vae" / "inputs.safetensors");
  const auto ex = io::load_safetensors(parity / "ltx2-audio-vae" / "expected.safetensors");
  const auto find_out = [](const plugin::NamedTensors& out, const std::string& name) {
    for (const auto& [n, t] : out)
      if (n == name) return t;
    ADD_FAILURE() << "no output " << name;
    return at::Tensor();
  };
  const plugin::NamedTensors stats = {{"latents_mean", in.at("pipeline.latents_mean")},
                                      {"latents_std", in.at("pipeline.latents_std")}};
  auto with = [&](plugin::NamedTensors a, const std::string& name, const at::Tensor& t) {
    a.emplace_back(name, t);
    return a;
  };
  const auto den = find_out(
      plugin::component_forward(*vae, with(stats, "packed", in.at("pipeline.packed_latents")), R"({"method": "denormalize"})"),
      "packed");
  const auto z = find_out(plugin::component_forward(*vae, {{"packed", den}}, R"({"method": "unpack"})"), "latents");
  EXPECT_TRUE(torch::allclose(z, ex.at("pipeline.unpacked"), 1e-5, 1e-5));
  const auto mel = find_out(plugin::component_forward(*vae, {{"latents", z}}, R"({"method": "decode"})"), "sample");
  EXPECT_TRUE(torch::allclose(mel, ex.at("decode.sample"), 1e-4, 1e-4));
  // pack inverts unpack; normalize inverts denormalize.
  EXPECT_TRUE(torch::equal(find_out(plugin::component_forward(*vae, {{"latents", z}}, R"({"method": "pack"})"), "packed"), den));
  const auto back =
      find_out(plugin::component_forward(*vae, with(stats, "packed", den), R"({"method": "normalize"})"), "packed");
  EXPECT_TRUE(torch::allclose(back, in.at("pipeline.packed_latents"), 1e-5, 1e-5));
  // The VAE's own statistics have base_channels (8) entries here, not the packed 128: refused.
  try {
    plugin::component_forward(*vae, {{"packed", den}}, R"({"method": "normalize"})");
    FAIL() << "normalised 128 features with 8 statistics";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "statistics")) << e.what();
  }
  // A clip's sound -> the log-mel the VAE encodes (1 + samples / 160 frames of 64 mels).
  const auto lm = find_out(plugin::component_forward(*vae, {{"waveform", torch::randn({1, 2, 1600})}},
                                                     R"({"method": "log_mel"})"),
                           "sample");
  EXPECT_EQ(lm.sizes(), (std::vector<std::int64_t>{1, 2, 11, 64}));
  const auto out = plugin::component_forward(*voc, {{"mel", mel}}, R"({"method": "vocode"})");
  const auto wave = io::load_safetensors(parity / "ltx2-vocoder" / "expected.safetensors").at("sample");
  EXPECT_TRUE(torch::allclose(find_out(out, "waveform"), wave, 1e-4, 1e-4));
  EXPECT_EQ(find_out(out, "sample_rate").item<std::int64_t>(), 24000);
  try {
    plugin::component_forward(*voc, {{"mel", mel}}, R"({"method": "vocdoe"})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "did you mean 'vocode'")) << e.what();
  }
}

TEST_F(PipelineTest, OpenWithoutWeightsOrPrepare) {
  const fs::path model = write_model(tmp_.path() / "shapes", "YetoProbeDenoiser", at::kFloat, false);
  pipeline::OpenOptions o;
  o.load_weights = false;
  o.prepare = false;
  auto p = pipeline::Pipeline::open(make_config(base_overrides(model, "pipeprobe", {probe_plugins()})), o);
  const auto file = io::load_safetensors(model / "transformer" / "diffusion_pytorch_model.safetensors");
  const auto w = params_of(p->component("transformer"));
  EXPECT_EQ(w.at("proj.weight").sizes(), file.at("proj.weight").sizes());
  EXPECT_FALSE(torch::equal(w.at("proj.weight"), file.at("proj.weight")));
  // Not prepared: the plugin never saw its components.
  EXPECT_EQ(json::parse(p->plugin().load_artifact(tmp_.path().string()))["own"], false);
}

TEST_F(PipelineTest, ErrorsNameTheProblemWithTheirExitCodes) {
  // A model that does not exist.
  try {
    pipeline::Pipeline::open(make_config(base_overrides(tmp_.path() / "nope", "tinyden", {stage_plugins()})));
    FAIL() << "opened a missing model";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_found) << e.what();
    EXPECT_TRUE(contains(e.what(), "nope")) << e.what();
  }
  // No model at all.
  try {
    pipeline::Pipeline::open(config::Config());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::usage) << e.what();
    EXPECT_TRUE(contains(e.what(), "model.id")) << e.what();
  }

  // A component class nobody implements.
  const fs::path model = write_model(tmp_.path() / "unknown", "YetoTinyDenoiser", at::kFloat, true);
  json index = json::parse(std::ifstream(model / "model_index.json"));
  index["extra"] = {"diffusers", "NoSuchTransformer3DModel"};
  write_json(model / "model_index.json", index);
  write_json(model / "extra" / "config.json", {{"_class_name", "NoSuchTransformer3DModel"}});
  try {
    pipeline::Pipeline::open(make_config(base_overrides(model, "tinyden", {stage_plugins()})));
    FAIL() << "built an unknown class";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::bad_input) << e.what();
    EXPECT_TRUE(contains(e.what(), "NoSuchTransformer3DModel")) << e.what();
    EXPECT_TRUE(contains(e.what(), "component 'extra'")) << e.what();
  }

  // Weights that do not fit the class: named, nothing loaded.
  const fs::path bad = write_model(tmp_.path() / "bad", "YetoTinyDenoiser", at::kFloat, false);  // no time_embed
  try {
    pipeline::Pipeline::open(make_config(base_overrides(bad, "tinyden", {stage_plugins()})));
    FAIL() << "loaded a checkpoint that lacks a parameter";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::bad_input) << e.what();
    EXPECT_TRUE(contains(e.what(), "missing time_embed")) << e.what();
    EXPECT_TRUE(contains(e.what(), "component 'transformer'")) << e.what();
  }

  // An unsigned copy of the plugin is refused before it is opened.
  const fs::path unsigned_dir = tmp_.path() / "unsigned";
  fs::create_directories(unsigned_dir);
  for (const char* f : {"tinyden.so", "tinyden.yeto.json"}) fs::copy_file(stage_plugins() / f, unsigned_dir / f);
  const fs::path good = write_model(tmp_.path() / "good", "YetoTinyDenoiser", at::kFloat, true);
  try {
    pipeline::Pipeline::open(make_config(base_overrides(good, "tinyden", {unsigned_dir})));
    FAIL() << "loaded an unsigned plugin";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::plugin_unsigned) << e.what();
    EXPECT_TRUE(contains(e.what(), "unsigned")) << e.what();
  }
  // A plugin name that does not exist.
  try {
    pipeline::Pipeline::open(make_config(base_overrides(good, "tinydem", {stage_plugins()})));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::plugin_not_found) << e.what();
    EXPECT_TRUE(contains(e.what(), "did you mean 'tinyden'")) << e.what();
  }
}
