// Sampling a structure with Protenix's EDM sampler (AF3 Algorithm 18 as protenix/model/generator.py
// runs it: before every step each sample is re-centred and randomly rotated and translated, noise
// is added up to t_hat = c_tau_last (1 + gamma), the denoiser runs at t_hat and an Euler step of
// size eta (c_tau - t_hat) follows), and the batch's atoms described for a structure writer.
#pragma once

#include <cstdint>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "protenix_cases.hpp"
#include "protenix_diffusion.hpp"
#include "protenix_loss.hpp"

namespace yeto::protenix {

// [n_sample, N_atom, 3] coordinates in Angstrom after `steps` sampler steps, every random draw
// from `gen` (same generator state, same coordinates).
at::Tensor sample_structure(DiffusionModuleImpl& model, const DiffusionInputs& in, const EdmConfig& c,
                            std::int64_t steps, std::int64_t n_sample, at::Generator& gen);

// The structure a generate call returns, for the host's mmCIF / PDB writer:
//   structure_coordinates  float32 [S, N_atom, 3] (Angstrom)
//   structure_atom_name    uint8 [N_atom, 4] (ASCII from ref_atom_name_chars, NUL-padded)
//   structure_element      int64 [N_atom] (atomic number: the ref_element one-hot's index + 1; 0 unknown)
//   structure_residue_name uint8 [N_atom, 3] (from restype when the batch has it: the 20 amino
//                          acids, A/G/C/U, DA/DG/DC/DT, UNK / N / DN; else "LIG" for ligand
//                          atoms and "UNK")
//   structure_residue_index int64 [N_atom] (residue_index of the atom's token, 1-based)
//   structure_chain_index  int64 [N_atom] (asym_id of the atom's token, renumbered 0, 1, ... in
//                          order of first appearance)
//   structure_is_hetero    uint8 [N_atom] (1 for ligand atoms)
// `features` are the batch's tensors by their Protenix names under `prefix`. Throws
// std::invalid_argument naming a missing feature.
TensorMap structure_outputs(const TensorMap& features, const std::string& prefix, const at::Tensor& coordinates);

}  // namespace yeto::protenix
