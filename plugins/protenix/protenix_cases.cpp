#include "protenix_cases.hpp"

#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace yeto::protenix {

namespace {

const at::Tensor* lookup(const TensorMap& t, const std::string& name) {
  const auto it = t.find(name);
  return it == t.end() || !it->second.defined() ? nullptr : &it->second;
}

at::Tensor require(const TensorMap& t, const std::string& name) {
  if (const auto* v = lookup(t, name)) return *v;
  throw std::invalid_argument("missing tensor '" + name + "'");
}

TensorMap gradients(torch::nn::Module& model) {
  TensorMap out;
  for (const auto& p : model.named_parameters())
    if (p.value().requires_grad() && p.value().grad().defined()) out["grad." + p.key()] = p.value().grad().clone();
  return out;
}

void zero_grad(torch::nn::Module& model) {
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
}

}  // namespace

DiffusionInputs diffusion_inputs(const TensorMap& t, const std::string& prefix) {
  auto get = [&](const std::string& name) { return require(t, prefix + name); };
  auto maybe = [&](const std::string& name) -> at::Tensor {
    const auto* v = lookup(t, prefix + name);
    return v ? *v : at::Tensor();
  };
  auto trunk = [&](const std::string& name) {
    if (const auto* v = lookup(t, prefix + name)) return *v;
    return require(t, name);
  };
  DiffusionInputs in;
  in.ref_pos = get("ref_pos");
  in.ref_charge = get("ref_charge");
  in.ref_mask = get("ref_mask");
  in.ref_element = get("ref_element");
  in.ref_atom_name_chars = get("ref_atom_name_chars");
  in.atom_to_token_idx = get("atom_to_token_idx");
  in.relp = maybe("relp");
  if (!in.relp.defined())
    in.relp = relative_position_features(get("asym_id"), get("residue_index"), get("entity_id"), get("token_index"),
                                         get("sym_id"));
  in.d_lm = maybe("d_lm");
  in.v_lm = maybe("v_lm");
  in.mask_trunked = maybe("pad_info.mask_trunked");
  if (!in.d_lm.defined() || !in.v_lm.defined() || !in.mask_trunked.defined()) {
    const auto f = local_atom_features(in.ref_pos, get("ref_space_uid"));
    if (!in.d_lm.defined()) in.d_lm = f.d_lm;
    if (!in.v_lm.defined()) in.v_lm = f.v_lm;
    if (!in.mask_trunked.defined()) in.mask_trunked = f.mask_trunked;
  }
  in.s_inputs = trunk("s_inputs");
  in.s_trunk = trunk("s_trunk");
  in.z_trunk = trunk("z_trunk");
  return in;
}

TensorMap run_module_case(DiffusionModuleImpl& model, const TensorMap& inputs) {
  at::AutoGradMode grad_mode(true);
  const auto in = diffusion_inputs(inputs);
  const auto& x = require(inputs, "x_noisy");
  const auto& t = require(inputs, "t_hat_noise_level");
  model.eval();
  TensorMap out;
  {
    at::NoGradGuard no_grad;
    Intermediates inter;
    out["x_denoised"] = model.forward(x, t, in, true, &inter);
    for (auto& [n, v] : inter) out["intermediate." + n] = v;
    out["x_denoised_uncond"] = model.forward(x, t, in, false);
  }
  zero_grad(model);
  const auto loss = (model.forward(x, t, in) - require(inputs, "loss_target")).pow(2).mean();
  loss.backward();
  out["loss"] = loss.detach();
  for (auto& [n, g] : gradients(model)) out[n] = g;
  zero_grad(model);
  return out;
}

TensorMap run_loss_case(DiffusionModuleImpl& model, const TensorMap& inputs, const nlohmann::json& config) {
  at::AutoGradMode grad_mode(true);
  const auto in = diffusion_inputs(inputs);
  const double sd = config.value("sigma_data", 16.0);
  const auto loss_section = config.contains("loss") ? config["loss"] : nlohmann::json::object();
  const auto weights = LossWeights::from_json(loss_section, LossWeights::defaults());
  LossWeights finetune = weights;
  finetune.alpha_bond = 1.0;
  finetune.smooth_lddt = 0.0;
  if (config.contains("finetune_weight_overrides")) {
    const auto& o = config["finetune_weight_overrides"];
    finetune.alpha_bond = o.value("loss.weight.alpha_bond", finetune.alpha_bond);
    finetune.smooth_lddt = o.value("loss.weight.smooth_lddt", finetune.smooth_lddt);
  }
  model.train();
  zero_grad(model);
  const auto x_denoised = model.forward(require(inputs, "x_noisy"), require(inputs, "sigma"), in);
  DiffusionLossInputs li;
  li.pred = x_denoised.detach().requires_grad_(true);
  li.noise_level = require(inputs, "sigma");
  li.true_coordinate = require(inputs, "label_dict.coordinate");
  li.coordinate_mask = require(inputs, "label_dict.coordinate_mask");
  li.is_dna = require(inputs, "is_dna");
  li.is_rna = require(inputs, "is_rna");
  li.is_ligand = require(inputs, "is_ligand");
  li.bond_mask = require(inputs, "bond_mask");
  TensorMap out = diffusion_loss(li, weights, sd);
  const auto loss = out["loss"];
  loss.backward();
  const auto grad_pred = li.pred.grad().clone();
  x_denoised.backward(grad_pred);
  out["loss"] = loss.detach();
  out["grad.pred_dict.coordinate"] = grad_pred;
  out["x_denoised"] = x_denoised.detach();
  {
    at::NoGradGuard no_grad;
    li.pred = x_denoised.detach();
    out["loss_finetune_weights"] = diffusion_loss(li, finetune, sd)["loss"].detach();
  }
  for (auto& [n, g] : gradients(model)) out[n] = g;
  zero_grad(model);
  model.eval();
  return out;
}

TensorMap run_schedule_case(const nlohmann::json& config, const TensorMap& inputs) {
  const EdmConfig c = EdmConfig::from_json(config);
  TensorMap out;
  for (std::int64_t n : {200, 20, 5}) out["noise_schedule.N_step_" + std::to_string(n)] = inference_noise_schedule(c, n);
  out["train_noise_sampler.noise_level"] = training_noise_level(c, require(inputs, "train_noise_sampler.rnd_normal"));
  for (int i = 0;; ++i) {
    const std::string p = "step" + std::to_string(i) + ".";
    if (!lookup(inputs, p + "noise_schedule")) break;
    const auto schedule = require(inputs, p + "noise_schedule");
    const double last = schedule[0].item<float>(), next = schedule[1].item<float>();
    const auto step = sampler_noise(c, last, next, require(inputs, p + "x_l_augmented"), require(inputs, p + "eps"));
    out[p + "t_hat"] = step.t_hat;
    out[p + "x_noisy"] = step.x_noisy;
    out[p + "x_next"] = sampler_update(c, step, next, require(inputs, p + "x_denoised"));
  }
  return out;
}

}  // namespace yeto::protenix
