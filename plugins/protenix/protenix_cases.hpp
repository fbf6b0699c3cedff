// The recorded protenix-* reference cases, computed from their inputs by name: the module cases
// (forward, the use_conditioning=False call, intermediates, loss and gradients), the diffusion
// loss case (module -> ProtenixLoss diffusion terms with default and fine-tuning weights,
// gradients wrt the prediction and every parameter) and the EDM schedule case. Shared by the
// plugin's check-parity components and the family's tests.
#pragma once

#include <map>
#include <string>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "protenix_diffusion.hpp"
#include "protenix_loss.hpp"

namespace yeto::protenix {

using TensorMap = std::map<std::string, at::Tensor>;

// DiffusionInputs from a batch's tensors by their Protenix names (ref_pos, ..., relp, d_lm, v_lm,
// pad_info.mask_trunked, s_inputs, s_trunk, z_trunk), with `prefix` before every name (e.g.
// "input_feature_dict."; the trunk outputs are looked up without it too). A missing derived
// feature (relp, d_lm, v_lm, mask) is computed from the raw ones (asym_id, residue_index, entity_id,
// token_index, sym_id, ref_space_uid). Throws std::invalid_argument naming a missing tensor.
DiffusionInputs diffusion_inputs(const TensorMap& t, const std::string& prefix = "");

// Outputs of a protenix-diffusion-module case named as its compare keys.
TensorMap run_module_case(DiffusionModuleImpl& model, const TensorMap& inputs);
// Outputs of the protenix-diffusion-loss case; `loss_config` is its loss_config.json.
TensorMap run_loss_case(DiffusionModuleImpl& model, const TensorMap& inputs, const nlohmann::json& loss_config);
// Outputs of the protenix-edm-schedule case; `config` is its config.json.
TensorMap run_schedule_case(const nlohmann::json& config, const TensorMap& inputs);

}  // namespace yeto::protenix
