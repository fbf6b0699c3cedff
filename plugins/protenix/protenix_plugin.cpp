// The Protenix family plugin, written against the SDK only: the DiffusionModule and EDM scheduler
// component classes (also under the class names the protenix-* reference cases record, so
// check-parity computes those cases here), the repository plan and tiny preset from
// protenix.family.json, Protenix's released checkpoints (torch.save {"model": {"module.<name>":
// ...}} read weights-only by the host), LoRA (or full) tuning of the diffusion module, the
// diffusion training objective as loss_step, and generate (the EDM sampler -> the structure_*
// outputs a structure writer turns into mmCIF / PDB).
//
// A training row is one pre-collated Protenix batch (micro batch 1 unless rows have equal shapes):
// its tensors by their Protenix names, the three dicts flattened as `input_feature_dict.<key>`,
// `label_dict.<key>`, `label_full_dict.<key>`, plus the frozen trunk's outputs `s_inputs`,
// `s_trunk`, `z_trunk` (precomputed: the pairformer and MSA module are not part of this plugin).
// The manifest names them per row ("tensors": {"input_feature_dict.ref_pos":
// "batch.safetensors#input_feature_dict.ref_pos", ...}) with "latents":
// "batch.safetensors#label_dict.coordinate" as the row's media. Per row, from its seed:
// sample_diffusion_training (N_sample copies of the ground truth centred, rotated and translated at
// random, sigma = exp(N(p_mean, p_std)) sigma_data, x_noisy = x + sigma eps) -> DiffusionModule ->
// the ProtenixLoss diffusion terms with the scheduler config's loss weights.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <yeto/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protenix_cases.hpp"
#include "protenix_diffusion.hpp"
#include "protenix_family.hpp"
#include "protenix_loss.hpp"
#include "protenix_sampler.hpp"
#include "yeto/family/family.hpp"
#include "yeto/family/repository.hpp"

namespace yeto::protenix {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using sdk::NamedTensors;

constexpr const char* kModule = "ProtenixDiffusionModule";
constexpr const char* kModulePath = "protenix.model.modules.diffusion.DiffusionModule";
constexpr const char* kScheduler = "ProtenixEdmScheduler";
constexpr const char* kLossCase =
    "protenix.model.loss.ProtenixLoss (diffusion terms: MSELoss, SmoothLDDTLoss, BondLoss) on "
    "protenix.model.generator.sample_diffusion_training + protenix.model.modules.diffusion.DiffusionModule";
constexpr const char* kScheduleCase = "protenix.model.generator: InferenceNoiseScheduler, TrainingNoiseSampler, sample_diffusion";
// The DiffusionModule's tensors inside a released checkpoint ({"model": state dict of the DDP model}).
constexpr const char* kCheckpointPrefix = "model.module.diffusion_module.";

TensorMap to_map(const NamedTensors& in) {
  TensorMap m;
  for (const auto& [n, t] : in)
    if (t.defined()) m[n] = t;
  return m;
}

NamedTensors to_named(const TensorMap& m) {
  NamedTensors out;
  for (const auto& [n, t] : m) out.emplace_back(n, t);
  return out;
}

bool recorded_case(const std::string& options, json& c) {
  if (options.empty()) return false;
  const json o = family::parse_json(options, "Protenix forward options");
  if (!o.is_object() || !o.contains("recorded_case")) return false;
  c = o["recorded_case"];
  return true;
}

class DiffusionComponent : public family::ModelComponent<DiffusionModule, DiffusionConfig> {
 public:
  DiffusionComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir,
                       {kModule, "is this the diffusion_module of a Protenix checkpoint of this configuration?",
                        /*with_buffers=*/false}) {}

  // Inputs: x_noisy [N_sample, N_atom, 3], t_hat_noise_level [N_sample] and the features by their
  // Protenix names -> x_denoised. Options {"recorded_case": case.json}: a protenix-diffusion-module
  // case's outputs (forward, unconditioned call, intermediates, loss and gradients).
  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    json c;
    try {
      if (recorded_case(options, c)) return to_named(run_module_case(*model_, to_map(in)));
      const auto m = to_map(in);
      return {{"x_denoised", model_->forward(sdk::get(in, "x_noisy"), sdk::get(in, "t_hat_noise_level"),
                                             diffusion_inputs(m))}};
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("Protenix DiffusionModule: ") + e.what());
    }
  }
};

// The protenix-diffusion-loss case: the case folder's DiffusionModule (config.json, model.safetensors)
// and ProtenixLoss with its loss_config.json.
class LossCaseComponent : public family::ModelComponent<DiffusionModule, DiffusionConfig> {
 public:
  LossCaseComponent(const std::string& config_json, const std::string& dir)
      : ModelComponent(config_json, dir, {kLossCase, "is this the case's DiffusionModule?", false}), dir_(dir) {}

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    json c;
    if (!recorded_case(options, c))
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "ProtenixLoss: forward options must be {\"recorded_case\": <case.json>}");
    try {
      return to_named(run_loss_case(*model_, to_map(in), family::read_json_file(dir_ + "/loss_config.json")));
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("ProtenixLoss: ") + e.what());
    }
  }

 private:
  std::string dir_;
};

// The EDM schedule, training noise sampler, sampler settings and the training objective's settings
// (N_sample training copies per batch in module calls of diffusion_chunk_size, the sample count of
// generate N_sample_generate, the loss weights).
struct TrainingSettings {
  EdmConfig edm;
  std::int64_t n_sample = 48;         // Protenix's diffusion_batch_size
  std::int64_t chunk = 4;             // samples per module call (diffusion_chunk_size; 0: all at once)
  std::int64_t generate_samples = 5;  // Protenix's inference N_sample
  LossWeights weights = LossWeights::defaults();
};

class SchedulerComponent : public sdk::Component {
 public:
  SchedulerComponent(const std::string& config_json, const std::string& dir) : config_text_(config_json) {
    const std::string where = dir.empty() ? std::string(kScheduler) + " config" : dir + "/scheduler_config.json";
    try {
      const json j = family::parse_json(config_json, where);
      settings_.edm = EdmConfig::from_json(j);
      const family::ConfigReader r(j, where);
      settings_.n_sample = r.integer("N_sample_training", r.integer("N_sample", settings_.n_sample));
      settings_.generate_samples = r.integer("N_sample_generate", settings_.generate_samples);
      settings_.chunk = r.integer("diffusion_chunk_size", settings_.chunk);
      if (settings_.n_sample < 1 || settings_.generate_samples < 1)
        throw std::invalid_argument("'N_sample' and 'N_sample_generate' must be at least 1");
      if (settings_.chunk < 0) throw std::invalid_argument("'diffusion_chunk_size' must be 0 (no chunks) or positive");
      if (j.contains("loss")) settings_.weights = LossWeights::from_json(j["loss"], settings_.weights);
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, where + ": " + e.what());
    }
  }

  NamedTensors parameters() override { return {}; }

  NamedTensors forward(const NamedTensors& in, const std::string& options) override {
    json c;
    if (!recorded_case(options, c))
      sdk::fail(YETO_ERR_INVALID_ARGUMENT,
                "Protenix EDM scheduler: forward options must be {\"recorded_case\": <case.json>} (sampling runs "
                "through generate)");
    try {
      return to_named(run_schedule_case(family::parse_json(config_text_, "scheduler config"), to_map(in)));
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("Protenix EDM scheduler: ") + e.what());
    }
  }

  const TrainingSettings& settings() const { return settings_; }

 private:
  std::string config_text_;
  TrainingSettings settings_;
};

// The features a training row must carry (input_feature_dict.<name>), besides the label and trunk.
const std::vector<std::string> kRowFeatures = {
    "ref_pos",   "ref_charge", "ref_mask",   "ref_element", "ref_atom_name_chars", "ref_space_uid", "atom_to_token_idx",
    "asym_id",   "residue_index", "entity_id", "token_index", "sym_id", "is_dna", "is_rna", "is_ligand"};
const std::vector<std::string> kTrunk = {"s_inputs", "s_trunk", "z_trunk"};
constexpr const char* kRowHelp =
    "a row is one pre-collated Protenix batch: input_feature_dict.<key> (ref_pos, ref_charge, ref_mask, ref_element, "
    "ref_atom_name_chars, ref_space_uid, atom_to_token_idx, asym_id, residue_index, entity_id, token_index, sym_id, "
    "is_dna, is_rna, is_ligand; optional relp, d_lm, v_lm, pad_info.mask_trunked, bond_mask), "
    "label_dict.coordinate and label_dict.coordinate_mask, and the frozen trunk's s_inputs, s_trunk, z_trunk, each "
    "named in the manifest's \"tensors\" (docs/MODELS.md, Protenix)";

// One row's tensors (the batch's entry i of every tensor), named without the row dimension.
TensorMap row_tensors(const NamedTensors& batch, std::int64_t i) {
  TensorMap m;
  for (const auto& [n, t] : batch)
    if (t.defined() && t.dim() > 0 && i < t.size(0)) m[n] = t[i];
  return m;
}

// The data check of one row: every required tensor present, the ground truth finite where it is
// resolved, the trunk outputs finite. Fails naming the row and what to do.
void check_row(TensorMap& t, const std::string& row) {
  std::vector<std::string> missing;
  for (const auto& k : kRowFeatures)
    if (!t.count("input_feature_dict." + k)) missing.push_back("input_feature_dict." + k);
  if (!t.count("label_dict.coordinate")) {
    if (t.count("latents")) t["label_dict.coordinate"] = t["latents"];
    else missing.push_back("label_dict.coordinate");
  }
  if (!t.count("label_dict.coordinate_mask")) missing.push_back("label_dict.coordinate_mask");
  for (const auto& k : kTrunk)
    if (!t.count(k) && !t.count("input_feature_dict." + k)) missing.push_back(k);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "protenix: row " + row + ": missing " + list + "; " + kRowHelp);
  }
  const auto& pos = t["label_dict.coordinate"];
  const auto& mask = t["label_dict.coordinate_mask"];
  const auto n_atom = t["input_feature_dict.ref_pos"].size(0);
  if (pos.dim() != 2 || pos.size(0) != n_atom || pos.size(1) != 3)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "protenix: row " + row + ": label_dict.coordinate must be [" +
                                             std::to_string(n_atom) + ", 3] (N_atom of input_feature_dict.ref_pos), got " +
                                             c10::str(pos.sizes()));
  if (mask.numel() != n_atom)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "protenix: row " + row + ": label_dict.coordinate_mask must be [" +
                                             std::to_string(n_atom) + "], got " + c10::str(mask.sizes()));
  for (const char* k : {"is_dna", "is_rna", "is_ligand"}) {
    const auto& v = t["input_feature_dict." + std::string(k)];
    if (v.numel() != n_atom)
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "protenix: row " + row + ": input_feature_dict." + k + " must be [" +
                                               std::to_string(n_atom) + "] (per atom), got " + c10::str(v.sizes()));
  }
  const auto resolved = mask.reshape({n_atom}).to(at::kFloat) > 0.5;
  const auto bad = at::isfinite(pos.to(at::kFloat)).all(-1).logical_not().logical_and(resolved);
  if (bad.any().item<bool>()) {
    const auto first = bad.nonzero()[0][0].item<std::int64_t>();
    sdk::fail(YETO_ERR_INVALID_ARGUMENT,
              "protenix: row " + row + ": label_dict.coordinate has " + std::to_string(bad.sum().item<std::int64_t>()) +
                  " resolved atom(s) with NaN or infinite coordinates (first: atom " + std::to_string(first) +
                  "); set label_dict.coordinate_mask to 0 for atoms without coordinates");
  }
  if (!resolved.any().item<bool>())
    sdk::fail(YETO_ERR_INVALID_ARGUMENT,
              "protenix: row " + row + ": label_dict.coordinate_mask is 0 for every atom; the row has no ground truth");
  // Unresolved atoms: their coordinates are never used; a NaN there must not reach the loss.
  t["label_dict.coordinate"] = at::where(resolved.unsqueeze(-1), pos.to(at::kFloat), at::zeros({}, at::kFloat));
  for (const auto& k : kTrunk) {
    const auto& v = t.count(k) ? t[k] : t["input_feature_dict." + k];
    if (!at::isfinite(v.to(at::kFloat)).all().item<bool>())
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, "protenix: row " + row + ": " + k +
                                               " holds NaN or infinite values; recompute the trunk outputs of this batch");
  }
}

// The first *.pt / *.pth / *.ckpt file of a directory, by name.
fs::path release_checkpoint(const std::string& model_dir) {
  if (const char* env = std::getenv("YETO_PROTENIX_CHECKPOINT"); env && *env) {
    if (!fs::is_regular_file(env))
      sdk::fail(YETO_ERR_NOT_FOUND, std::string("YETO_PROTENIX_CHECKPOINT: '") + env + "' is not a file");
    return env;
  }
  std::set<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(model_dir, ec)) {
    const auto ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".pt" || ext == ".pth" || ext == ".ckpt")) found.insert(e.path());
  }
  if (found.empty())
    sdk::fail(YETO_ERR_NOT_FOUND,
              "'" + model_dir + "' has no model_index.json and no Protenix checkpoint (*.pt, e.g. "
              "protenix_base_default_v1.0.0.pt); put the released checkpoint there or set YETO_PROTENIX_CHECKPOINT");
  if (found.size() > 1)
    sdk::fail(YETO_ERR_INVALID_ARGUMENT, "'" + model_dir + "' holds " + std::to_string(found.size()) +
                                             " checkpoints (" + found.begin()->filename().string() +
                                             ", ...); keep one or name it with YETO_PROTENIX_CHECKPOINT");
  return *found.begin();
}

class ProtenixPlugin : public sdk::Plugin {
 public:
  void register_components(sdk::ComponentRegistry& registry) override {
    registry.add<DiffusionComponent>(kModule);
    registry.add<DiffusionComponent>(kModulePath);
    registry.add<LossCaseComponent>(kLossCase);
    registry.add<SchedulerComponent>(kScheduler);
    registry.add<SchedulerComponent>(kScheduleCase);
  }

  // A repository in the family file's layout (diffusion_module, scheduler); or a directory without
  // model_index.json holding a released checkpoint (YETO_PROTENIX_CHECKPOINT names one elsewhere):
  // the diffusion module's tensors under model.module.diffusion_module., its configuration the
  // family file's (Protenix base) merged with the directory's config.json when it has one, the
  // scheduler's with its scheduler_config.json.
  std::string load_pipeline(const std::string& model_dir, const std::string& model_index_json) override {
    const auto index = family::parse_json(model_index_json, model_dir + "/model_index.json");
    try {
      if (!(index.is_object() && index.empty())) return description().plan(model_dir, index).dump();
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    const auto checkpoint = release_checkpoint(model_dir);
    const json& configs = description().document().at("configs");
    json module_config = configs.at("diffusion_module");
    const auto overrides = fs::path(model_dir) / "config.json";
    if (fs::is_regular_file(overrides)) module_config.merge_patch(family::read_json_file(overrides.string()));
    try {
      DiffusionConfig::from_json(module_config);
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, overrides.string() + ": " + e.what());
    }
    sdk::Host::log(YETO_LOG_INFO, "protenix: released checkpoint " + checkpoint.string());
    json comps = json::object();
    comps["diffusion_module"] = {{"class", kModule},
                                 {"config", module_config},
                                 {"weights", checkpoint.string()},
                                 {"weights_prefix", kCheckpointPrefix},
                                 {"kind", "denoiser"}};
    // The directory's scheduler_config.json over the default EDM and training settings (N_sample,
    // diffusion_chunk_size, the loss weights: e.g. the fine-tuning stage's alpha_bond 1, smooth_lddt 0).
    json scheduler_config = configs.at("scheduler");
    const auto scheduler_overrides = fs::path(model_dir) / "scheduler_config.json";
    if (fs::is_regular_file(scheduler_overrides))
      scheduler_config.merge_patch(family::read_json_file(scheduler_overrides.string()));
    comps["scheduler"] = {{"class", kScheduler}, {"config", scheduler_config}};
    return json{{"components", comps}, {"family", "protenix"}}.dump();
  }

  std::string presets() override { return description().presets().dump(); }

  // LoRA (auto = attention: linear_q/k/v/o/g of every token and atom attention; all-linear; a
  // pattern list) or full tuning of the diffusion module.
  void prepare(const std::string& options_json) override {
    const auto o = family::parse_json(options_json, "prepare options");
    family::TuningSpec spec;
    spec.resolve_targets = [](const json& t) { return description().lora_targets(t); };
    spec.all_linear_excludes = {};
    auto& module = family::plugin_module("diffusion_module", "protenix");
    tuning_ = family::prepare_denoisers({&module}, o, spec);
    // Full tuning trains every parameter but the Fourier noise embedding, which Protenix keeps frozen.
    if (tuning_ == "full")
      for (auto& p : module.named_parameters())
        if (p.key().find("fourier_embedding.") != std::string::npos) p.value().set_requires_grad(false);
  }

  NamedTensors trainable_parameters() override {
    NamedTensors out;
    for (auto& [n, t] : family::trainable_parameters(
             {{"diffusion_module", &family::plugin_module("diffusion_module", "protenix")}}, tuning_))
      if (tuning_ != "full" || n.find(".fourier_embedding.") == std::string::npos) out.emplace_back(n, t);
    return out;
  }

  at::Tensor loss_step(const std::string& rows_json, const NamedTensors& batch, std::string& metrics) override {
    const json rows = family::parse_json(rows_json, "loss_step rows");
    if (!rows.is_array() || rows.empty()) sdk::fail(YETO_ERR_INVALID_ARGUMENT, "protenix loss_step: no rows");
    auto& model = denoiser();
    const auto& s = scheduler().settings();
    const auto device = model->linear_no_bias_s->weight.device();
    at::Tensor total;
    double mse = 0, lddt = 0, bond = 0, sigma = 0;
    const auto b = static_cast<std::int64_t>(rows.size());
    for (std::int64_t i = 0; i < b; ++i) {
      const auto& r = rows[static_cast<std::size_t>(i)];
      const std::string row = r.contains("row") ? r["row"].dump() : std::to_string(i);
      if (!r.contains("seed") || !r["seed"].is_number_unsigned())
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "protenix loss_step: row " + row + " has no seed");
      auto t = row_tensors(batch, i);
      check_row(t, row);
      for (auto& [n, v] : t) v = v.to(device);
      DiffusionInputs in;
      try {
        in = diffusion_inputs(t, "input_feature_dict.");
      } catch (const std::invalid_argument& e) {
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "protenix: row " + row + ": " + e.what() + "; " + kRowHelp);
      }
      auto gen = at::make_generator<at::CPUGeneratorImpl>(r["seed"].get<std::uint64_t>());
      const auto truth = t["label_dict.coordinate"].to(at::kFloat);
      const auto mask = t["label_dict.coordinate_mask"].to(at::kFloat).reshape({truth.size(0)});
      // sample_diffusion_training: augmented copies, noise levels, noise.
      const auto x_gt = centre_random_augmentation(truth.cpu(), s.n_sample, mask.cpu(), gen).to(device);
      const auto levels = training_noise_level(s.edm, at::normal(0.0, 1.0, {s.n_sample}, gen, at::kFloat)).to(device);
      const auto noise = at::normal(0.0, 1.0, x_gt.sizes(), gen, at::kFloat).to(device) * levels.view({-1, 1, 1});
      const bool was_training = model->is_training();
      model->train(r.value("training", false));
      at::Tensor x_denoised;
      try {
        // sample_diffusion_training's chunks of diffusion_chunk_size samples per module call.
        const auto x_noisy = x_gt + noise;
        const std::int64_t step = s.chunk > 0 ? s.chunk : s.n_sample;
        std::vector<at::Tensor> parts;
        for (std::int64_t c = 0; c < s.n_sample; c += step) {
          const auto len = std::min(step, s.n_sample - c);
          parts.push_back(model->forward(x_noisy.narrow(0, c, len), levels.narrow(0, c, len), in));
        }
        x_denoised = parts.size() == 1 ? parts.front() : at::cat(parts, 0);
      } catch (const std::invalid_argument& e) {
        model->train(was_training);
        sdk::fail(YETO_ERR_INVALID_ARGUMENT, "protenix: row " + row + ": " + e.what() + "; " + kRowHelp);
      }
      model->train(was_training);
      DiffusionLossInputs li;
      li.pred = x_denoised.to(at::kFloat);
      li.noise_level = levels;
      li.true_coordinate = truth;
      li.coordinate_mask = mask;
      li.is_dna = t["input_feature_dict.is_dna"];
      li.is_rna = t["input_feature_dict.is_rna"];
      li.is_ligand = t["input_feature_dict.is_ligand"];
      if (t.count("input_feature_dict.bond_mask")) li.bond_mask = t["input_feature_dict.bond_mask"];
      auto terms = diffusion_loss(li, s.weights, s.edm.sigma_data);
      total = total.defined() ? total + terms["loss"] : terms["loss"];
      mse += terms["mse_loss"].item<double>();
      lddt += terms["smooth_lddt_loss"].item<double>();
      bond += terms["bond_loss"].item<double>();
      sigma += levels.mean().item<double>();
    }
    const double n = static_cast<double>(b);
    metrics = json{{"mse_loss", mse / n}, {"smooth_lddt_loss", lddt / n}, {"bond_loss", bond / n}, {"sigma_mean", sigma / n}}
                  .dump();
    return total / n;
  }

  // Request: {"seed", "steps" (the scheduler's N_step), "num_samples" (N_sample_generate, 1)}; the
  // inputs are one batch's tensors (e.g. a .safetensors prompt) by the names of a training row
  // (or Protenix's bare feature names).
  // Returns the structure_* outputs (protenix_sampler.hpp) of the sampled coordinates.
  NamedTensors generate(const std::string& request_json, const NamedTensors& inputs) override {
    const auto& s = scheduler().settings();
    std::int64_t steps = s.edm.n_step, samples = s.generate_samples;
    std::uint64_t seed = 0;
    const auto r = family::parse_json(request_json, "generate request");
    try {
      const family::ConfigReader q(r, "protenix generate request");
      steps = q.integer("steps", steps);
      samples = q.integer("num_samples", samples);
      if (r.contains("seed")) {
        if (!r["seed"].is_number_unsigned() && !(r["seed"].is_number_integer() && r["seed"].get<std::int64_t>() >= 0))
          q.fail("seed", "must be a non-negative integer");
        seed = r["seed"].get<std::uint64_t>();
      }
      if (steps < 1) q.fail("steps", "must be at least 1");
      if (samples < 1) q.fail("num_samples", "must be at least 1");
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, e.what());
    }
    auto& model = denoiser();
    TensorMap t = to_map(inputs);
    // A batch saved with its row dimension (one row) is accepted as well.
    if (t.count("input_feature_dict.ref_pos") && t["input_feature_dict.ref_pos"].dim() == 3)
      for (auto& [n, v] : t)
        if (v.dim() > 0 && v.size(0) == 1) v = v[0];
    const auto device = model->linear_no_bias_s->weight.device();
    // The row names (input_feature_dict.<key>), or Protenix's bare feature names.
    const std::string prefix = t.count("input_feature_dict.ref_pos") ? "input_feature_dict." : "";
    try {
      for (auto& [n, v] : t) v = v.to(device);
      const auto in = diffusion_inputs(t, prefix);
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
      const bool was_training = model->is_training();
      model->eval();
      const auto coords = sample_structure(*model, in, s.edm, steps, samples, gen);
      model->train(was_training);
      auto out = structure_outputs(t, prefix, coords);
      return to_named(out);
    } catch (const std::invalid_argument& e) {
      sdk::fail(YETO_ERR_INVALID_ARGUMENT, std::string("protenix generate: ") + e.what() + "; " + kRowHelp);
    }
  }

 private:
  static DiffusionModule& denoiser() {
    const auto c = sdk::Host::component("diffusion_module");
    if (auto* impl = c.as<DiffusionComponent>(kModulePath)) return impl->model();
    return family::plugin_component<DiffusionComponent>("diffusion_module", kModule, "protenix").model();
  }
  static SchedulerComponent& scheduler() {
    return family::plugin_component<SchedulerComponent>("scheduler", kScheduler, "protenix");
  }

  std::string tuning_ = "lora";
};

}  // namespace
}  // namespace yeto::protenix

YETO_PLUGIN(yeto::protenix::ProtenixPlugin)
