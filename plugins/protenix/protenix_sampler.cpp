#include "protenix_sampler.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace yeto::protenix {

at::Tensor sample_structure(DiffusionModuleImpl& model, const DiffusionInputs& in, const EdmConfig& c,
                            std::int64_t steps, std::int64_t n_sample, at::Generator& gen) {
  if (n_sample < 1) throw std::invalid_argument("the number of samples must be at least 1");
  at::NoGradGuard no_grad;
  const auto schedule = inference_noise_schedule(c, steps);
  // Every draw on the CPU generator, then moved to the model's device.
  const auto cpu = at::TensorOptions().dtype(at::kFloat);
  const auto device = in.ref_pos.device();
  const std::int64_t n_atom = in.ref_pos.size(0);
  auto x = (schedule[0].item<float>() * at::normal(0.0, 1.0, {n_sample, n_atom, 3}, gen, cpu)).to(device);
  for (std::int64_t i = 0; i < steps; ++i) {
    const double last = schedule[i].item<float>(), next = schedule[i + 1].item<float>();
    // Re-centre each sample and move it rigidly at random.
    const auto [rot, t] = random_rigid(n_sample, gen, cpu);
    x = at::matmul(x - x.mean(-2, true), rot.to(device).transpose(-1, -2)) + t.to(device);
    const auto eps = at::normal(0.0, 1.0, {n_sample, n_atom, 3}, gen, cpu).to(device);
    const auto step = sampler_noise(c, last, next, x, eps);
    const auto denoised = model.forward(step.x_noisy, step.t_hat, in);
    x = sampler_update(c, step, next, denoised);
  }
  return x;
}

namespace {

const at::Tensor& feature(const TensorMap& f, const std::string& prefix, const std::string& name) {
  const auto it = f.find(prefix + name);
  if (it == f.end() || !it->second.defined()) throw std::invalid_argument("missing tensor '" + prefix + name + "'");
  return it->second;
}

const at::Tensor* optional_feature(const TensorMap& f, const std::string& prefix, const std::string& name) {
  const auto it = f.find(prefix + name);
  return it == f.end() || !it->second.defined() ? nullptr : &it->second;
}

// AlphaFold 3's 32 residue types (20 amino acids, UNK, A G C U, N, DA DG DC DT, DN, gap).
const char* const kResidueNames[32] = {"ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU", "GLY", "HIS", "ILE", "LEU",
                                       "LYS", "MET", "PHE", "PRO", "SER", "THR", "TRP", "TYR", "VAL", "UNK", "A",
                                       "G",   "C",   "U",   "N",   "DA",  "DG",  "DC",  "DT",  "DN",  "UNK"};

void put_name(std::uint8_t* dst, std::size_t width, const std::string& name) {
  for (std::size_t i = 0; i < width; ++i) dst[i] = i < name.size() ? static_cast<std::uint8_t>(name[i]) : 0;
}

}  // namespace

TensorMap structure_outputs(const TensorMap& f, const std::string& prefix, const at::Tensor& coordinates) {
  const auto tok = feature(f, prefix, "atom_to_token_idx").to(at::kLong).cpu().contiguous();
  const std::int64_t n_atom = tok.size(0);
  if (coordinates.dim() != 3 || coordinates.size(1) != n_atom || coordinates.size(2) != 3)
    throw std::invalid_argument("structure coordinates must be [S, " + std::to_string(n_atom) + ", 3]");
  TensorMap out;
  out["structure_coordinates"] = coordinates.to(at::kFloat).cpu().contiguous();

  // Atom names: one-hot of ord(c) - 32 per character; spaces (and empty slots) become NUL.
  const auto chars = feature(f, prefix, "ref_atom_name_chars").to(at::kFloat).cpu().reshape({n_atom, 4, 64});
  const auto code = (chars.argmax(-1) + 32).to(at::kByte);
  const auto hot = chars.sum(-1) > 0;
  auto names = at::where(hot.logical_and(code != 32), code, at::zeros_like(code)).contiguous();
  out["structure_atom_name"] = names;

  // Elements: the ref_element one-hot's index is the atomic number - 1 (H at 0; no hot entry: 0).
  const auto elem = feature(f, prefix, "ref_element").to(at::kFloat).cpu().reshape({n_atom, 128});
  out["structure_element"] = at::where(elem.sum(-1) > 0, elem.argmax(-1) + 1, at::zeros({n_atom}, at::kLong)).contiguous();

  const auto per_atom = [&](const at::Tensor& token_values) { return token_values.to(at::kLong).cpu().index_select(0, tok); };
  const auto residue_index = per_atom(feature(f, prefix, "residue_index"));
  const std::int64_t lowest = n_atom ? residue_index.min().item<std::int64_t>() : 1;
  out["structure_residue_index"] = (lowest < 1 ? residue_index - lowest + 1 : residue_index).contiguous();
  const auto asym = per_atom(feature(f, prefix, "asym_id"));
  auto chain = at::empty({n_atom}, at::kLong);
  {
    std::vector<std::int64_t> seen;
    auto a = asym.accessor<std::int64_t, 1>();
    auto c = chain.accessor<std::int64_t, 1>();
    for (std::int64_t i = 0; i < n_atom; ++i) {
      std::size_t k = 0;
      while (k < seen.size() && seen[k] != a[i]) ++k;
      if (k == seen.size()) seen.push_back(a[i]);
      c[i] = static_cast<std::int64_t>(k);
    }
  }
  out["structure_chain_index"] = chain;

  const auto* lig = optional_feature(f, prefix, "is_ligand");
  const auto hetero = lig ? (lig->to(at::kFloat).cpu().reshape({n_atom}) > 0.5) : at::zeros({n_atom}, at::kBool);
  out["structure_is_hetero"] = hetero.to(at::kByte).contiguous();

  auto residue = at::zeros({n_atom, 3}, at::kByte);
  const auto* restype = optional_feature(f, prefix, "restype");
  at::Tensor type_of_atom;
  if (restype) type_of_atom = restype->to(at::kFloat).cpu().argmax(-1).index_select(0, tok);
  auto h = hetero.accessor<bool, 1>();
  for (std::int64_t i = 0; i < n_atom; ++i) {
    std::string name = h[i] ? "LIG" : "UNK";
    if (type_of_atom.defined() && !h[i]) name = kResidueNames[type_of_atom[i].item<std::int64_t>() & 31];
    put_name(residue[i].data_ptr<std::uint8_t>(), 3, name);
  }
  out["structure_residue_name"] = residue;
  return out;
}

}  // namespace yeto::protenix
