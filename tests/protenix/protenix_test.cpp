// Protenix's DiffusionModule, EDM schedule and diffusion loss in process against the four
// protenix-* reference cases (every compare key within its case.json tolerance), the derived
// features against the recorded ones, the checkpoint names, and bad inputs refused naming the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "io/tensors.hpp"
#include "protenix_cases.hpp"
#include "protenix_diffusion.hpp"
#include "protenix_family.hpp"
#include "protenix_loss.hpp"
#include "protenix_sampler.hpp"
#include "yeto/nn/linear.hpp"
#include "yeto/nn/state_dict.hpp"

namespace fs = std::filesystem;
namespace px = yeto::protenix;
using nlohmann::json;

namespace {

const fs::path kParity = fs::path(YETO_TEST_FIXTURES) / "parity";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

px::DiffusionModule load_model(const fs::path& dir) {
  auto model = px::DiffusionModule(px::DiffusionConfig::from_json(read_json(dir / "config.json")));
  yeto::nn::LoadOptions strict;
  yeto::nn::load_named_tensors(*model, yeto::io::load_safetensors(dir / "model.safetensors"), strict);
  model->eval();
  return model;
}

// Every compare key of the case within |a - e| <= atol + rtol |e|; returns the worst ratio of the
// error to its bound (< 1 passes) and logs the max absolute error per group.
void expect_case(const fs::path& dir, const px::TensorMap& got) {
  const json c = read_json(dir / "case.json");
  const auto expected = yeto::io::load_safetensors(dir / "expected.safetensors");
  double worst_forward = 0, worst_grad = 0;
  std::size_t n = 0;
  for (const auto& [key, tol] : c.at("compare").items()) {
    const auto it = got.find(key);
    ASSERT_TRUE(it != got.end()) << dir.filename() << ": no output '" << key << "'";
    const auto e = expected.at(key).to(at::kDouble);
    const auto a = it->second.detach().to(at::kDouble);
    ASSERT_EQ(a.sizes(), e.sizes()) << dir.filename() << ": " << key;
    const double rtol = tol.at("rtol").get<double>(), atol = tol.at("atol").get<double>();
    const auto err = (a - e).abs();
    const bool ok = (err <= atol + rtol * e.abs()).all().item<bool>();
    const double max_err = e.numel() ? err.max().item<double>() : 0.0;
    EXPECT_TRUE(ok) << dir.filename() << ": " << key << " max abs error " << max_err << " (atol " << atol << ", rtol "
                    << rtol << ")";
    (key.rfind("grad.", 0) == 0 ? worst_grad : worst_forward) =
        std::max(key.rfind("grad.", 0) == 0 ? worst_grad : worst_forward, max_err);
    ++n;
  }
  std::cout << dir.filename().string() << ": " << n << " keys, max abs error " << worst_forward << " (outputs), "
            << worst_grad << " (gradients)\n";
}

}  // namespace

TEST(ProtenixDiffusionModule, NamesAreTheProtenixStateDict) {
  const auto dir = kParity / "protenix-diffusion-module";
  auto model = px::DiffusionModule(px::DiffusionConfig::from_json(read_json(dir / "config.json")));
  std::set<std::string> ours, theirs;
  for (const auto& p : model->named_parameters()) ours.insert(p.key());
  for (const auto& [n, t] : yeto::io::load_safetensors(dir / "model.safetensors")) theirs.insert(n);
  EXPECT_EQ(ours, theirs);
  EXPECT_TRUE(ours.count("diffusion_transformer.blocks.1.attention_pair_bias.attention.linear_g.weight"));
  EXPECT_TRUE(ours.count("atom_attention_encoder.small_mlp.5.weight"));
  // The Fourier noise embedding is frozen, as in Protenix.
  for (const auto& p : model->named_parameters())
    EXPECT_EQ(p.value().requires_grad(), p.key().find("fourier_embedding") == std::string::npos) << p.key();
}

TEST(ProtenixDiffusionModule, MatchesTheOneTrunkCase) {
  const auto dir = kParity / "protenix-diffusion-module";
  auto model = load_model(dir);
  expect_case(dir, px::run_module_case(*model, yeto::io::load_safetensors(dir / "inputs.safetensors")));
}

TEST(ProtenixDiffusionModule, MatchesTheTwoTrunkCase) {
  const auto dir = kParity / "protenix-diffusion-module-multitrunk";
  auto model = load_model(dir);
  expect_case(dir, px::run_module_case(*model, yeto::io::load_safetensors(dir / "inputs.safetensors")));
}

TEST(ProtenixDiffusionModule, CheckpointedBlocksGiveTheSameGradients) {
  const auto dir = kParity / "protenix-diffusion-module-multitrunk";
  auto model = load_model(dir);
  const auto inputs = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto plain = px::run_module_case(*model, inputs);
  model->activation_checkpointing.enabled = true;
  const auto checkpointed = px::run_module_case(*model, inputs);
  for (const auto& [k, v] : plain)
    if (k.rfind("grad.", 0) == 0) {
      // Recomputation sums the gradients of s and z in another order: equal to float32 rounding.
      const double bound = 1e-5 * std::max(1.0, v.abs().max().item<double>());
      EXPECT_LE((v - checkpointed.at(k)).abs().max().item<double>(), bound) << k;
    }
}

TEST(ProtenixDiffusionModule, DerivedFeaturesMatchTheRecordedOnes) {
  for (const char* name : {"protenix-diffusion-module", "protenix-diffusion-module-multitrunk", "protenix-diffusion-loss"}) {
    const auto in = yeto::io::load_safetensors(kParity / name / "inputs.safetensors");
    const auto relp = px::relative_position_features(in.at("asym_id"), in.at("residue_index"), in.at("entity_id"),
                                                     in.at("token_index"), in.at("sym_id"));
    EXPECT_TRUE(at::equal(relp, in.at("relp"))) << name;
    const auto f = px::local_atom_features(in.at("ref_pos"), in.at("ref_space_uid"));
    EXPECT_TRUE(at::equal(f.d_lm, in.at("d_lm"))) << name;
    EXPECT_TRUE(at::equal(f.v_lm, in.at("v_lm"))) << name;
    EXPECT_TRUE(at::equal(f.mask_trunked, in.at("pad_info.mask_trunked"))) << name;
  }
}

TEST(ProtenixDiffusionLoss, MatchesTheLossCase) {
  const auto dir = kParity / "protenix-diffusion-loss";
  auto model = load_model(dir);
  expect_case(dir, px::run_loss_case(*model, yeto::io::load_safetensors(dir / "inputs.safetensors"),
                                     read_json(dir / "loss_config.json")));
}

TEST(ProtenixEdmSchedule, MatchesTheScheduleCase) {
  const auto dir = kParity / "protenix-edm-schedule";
  expect_case(dir, px::run_schedule_case(read_json(dir / "config.json"),
                                         yeto::io::load_safetensors(dir / "inputs.safetensors")));
}

TEST(ProtenixDiffusionModule, RefusesBadInputsNamingTheTensor) {
  const auto dir = kParity / "protenix-diffusion-module";
  auto model = load_model(dir);
  auto inputs = yeto::io::load_safetensors(dir / "inputs.safetensors");
  auto in = px::diffusion_inputs(inputs);
  in.z_trunk = in.z_trunk.narrow(0, 0, 3);
  try {
    model->forward(inputs.at("x_noisy"), inputs.at("t_hat_noise_level"), in);
    FAIL() << "a wrong z_trunk was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'z_trunk' must be [4, 4, 16], got [3, 4, 16]"), std::string::npos) << e.what();
  }
  inputs.erase("ref_pos");
  try {
    px::diffusion_inputs(inputs);
    FAIL() << "a batch without ref_pos was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'ref_pos'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(px::DiffusionConfig::from_json(json{{"c_token", -3}}), std::invalid_argument);
  EXPECT_THROW(px::DiffusionConfig::from_json(json{{"transformer", {{"n_blocks", 2}, {"n_heads", 5}}}, {"c_token", 32}}),
               std::invalid_argument);
}

// The EDM sampler on the loss case's batch (8 tokens, 31 atoms: protein, RNA, ligand) to the
// structure_* outputs: shapes and dtypes, the atom names and elements of the case's system, chains
// and ligand flags, finite coordinates, and the same bytes from the same seed.
TEST(ProtenixSampler, SamplesTheStructureOutputs) {
  const auto dir = kParity / "protenix-diffusion-loss";
  auto model = load_model(dir);
  const auto inputs = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto in = px::diffusion_inputs(inputs);
  auto edm = px::EdmConfig::from_json(read_json(kParity / "protenix-edm-schedule" / "config.json"));
  auto sample = [&](std::uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return px::sample_structure(*model, in, edm, 5, 2, gen);
  };
  const auto coords = sample(7);
  ASSERT_EQ(coords.sizes(), (std::vector<std::int64_t>{2, 31, 3}));
  EXPECT_TRUE(at::isfinite(coords).all().item<bool>());
  EXPECT_TRUE(at::equal(coords, sample(7)));
  EXPECT_FALSE(at::equal(coords, sample(8)));

  const auto out = px::structure_outputs(inputs, "", coords);
  EXPECT_EQ(out.at("structure_coordinates").scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(out.at("structure_coordinates"), coords));
  EXPECT_EQ(out.at("structure_atom_name").scalar_type(), at::kByte);
  EXPECT_EQ(out.at("structure_atom_name").sizes(), (std::vector<std::int64_t>{31, 4}));
  EXPECT_EQ(out.at("structure_element").scalar_type(), at::kLong);
  EXPECT_EQ(out.at("structure_residue_name").sizes(), (std::vector<std::int64_t>{31, 3}));
  EXPECT_EQ(out.at("structure_is_hetero").scalar_type(), at::kByte);
  EXPECT_EQ(out.at("structure_residue_name").scalar_type(), at::kByte);
  for (const char* k : {"structure_element", "structure_residue_index", "structure_chain_index"}) {
    EXPECT_EQ(out.at(k).scalar_type(), at::kLong) << k;
    EXPECT_EQ(out.at(k).sizes(), (std::vector<std::int64_t>{31})) << k;
  }
  EXPECT_EQ(out.size(), 7u);
  const json system = read_json(dir / "case.json").at("system");
  const auto names = out.at("structure_atom_name");
  for (std::int64_t a = 0; a < 31; ++a) {
    std::string name;
    for (std::int64_t c = 0; c < 4; ++c)
      if (const auto ch = names[a][c].item<std::uint8_t>()) name += static_cast<char>(ch);
    EXPECT_EQ(name, system.at("atom_names")[static_cast<std::size_t>(a)].get<std::string>()) << a;
    const auto kind = system.at("atom_kinds")[static_cast<std::size_t>(a)].get<std::string>();
    EXPECT_EQ(out.at("structure_is_hetero")[a].item<std::uint8_t>(), kind == "lig" ? 1 : 0) << a;
    std::string residue;
    for (std::int64_t c = 0; c < 3; ++c)
      if (const auto ch = out.at("structure_residue_name")[a][c].item<std::uint8_t>()) residue += static_cast<char>(ch);
    EXPECT_EQ(residue, kind == "lig" ? "LIG" : "UNK") << a;  // the batch has no restype
  }
  // N, C, O of the first residue, P of the first nucleotide.
  const auto element = out.at("structure_element");
  EXPECT_EQ(element[0].item<std::int64_t>(), 7);
  EXPECT_EQ(element[1].item<std::int64_t>(), 6);
  EXPECT_EQ(element[3].item<std::int64_t>(), 8);
  EXPECT_EQ(element[17].item<std::int64_t>(), 15);
  // Chains by first appearance (asym_id 0, 1, 3 -> 0, 1, 2); residue indices as recorded (1-based).
  EXPECT_EQ(out.at("structure_chain_index")[0].item<std::int64_t>(), 0);
  EXPECT_EQ(out.at("structure_chain_index")[17].item<std::int64_t>(), 1);
  EXPECT_EQ(out.at("structure_chain_index")[30].item<std::int64_t>(), 2);
  EXPECT_EQ(out.at("structure_residue_index")[0].item<std::int64_t>(), 1);
  EXPECT_EQ(out.at("structure_residue_index")[11].item<std::int64_t>(), 4);
}

// The family file's LoRA target sets on the parity cases' module: auto (= attention) adapts the
// five attention projections of each of the 4 blocks (atom encoder, 2 token, atom decoder), in
// token and atom blocks alike; all-linear every projection.
TEST(ProtenixFamily, LoraTargetSetsAdaptTheAttentionProjections) {
  const auto dir = kParity / "protenix-diffusion-module-multitrunk";
  const auto t = px::description().lora_targets(json("auto"));
  EXPECT_FALSE(t.all_linear);
  EXPECT_EQ(px::description().lora_targets(json("attention")).patterns, t.patterns);
  auto model = load_model(dir);
  yeto::nn::LoraConfig cfg;
  cfg.r = 2;
  const auto adapted = yeto::nn::add_lora(*model, t.patterns, cfg);
  EXPECT_EQ(adapted.size(), 20u);
  for (const auto& path : adapted) EXPECT_NE(path.find(".attention_pair_bias.attention.linear_"), std::string::npos) << path;
  EXPECT_TRUE(std::count(adapted.begin(), adapted.end(),
                         "atom_attention_encoder.atom_transformer.diffusion_transformer.blocks.0.attention_pair_bias."
                         "attention.linear_q"));
  EXPECT_TRUE(std::count(adapted.begin(), adapted.end(), "diffusion_transformer.blocks.1.attention_pair_bias.attention.linear_g"));
  // A zero-initialised LoRA B leaves the module's output as it was; all-linear reaches every layer.
  auto all = load_model(dir);
  EXPECT_TRUE(px::description().lora_targets(json("all-linear")).all_linear);
  EXPECT_EQ(yeto::nn::add_lora(*all, {}, cfg).size(), yeto::nn::lora_capable_layers(*all).size());
  const auto inputs = yeto::io::load_safetensors(dir / "inputs.safetensors");
  const auto expected = yeto::io::load_safetensors(dir / "expected.safetensors");
  torch::NoGradGuard no_grad;
  const auto out = all->forward(inputs.at("x_noisy"), inputs.at("t_hat_noise_level"), px::diffusion_inputs(inputs));
  EXPECT_TRUE(at::allclose(out, expected.at("x_denoised"), 1e-4, 1e-4));
}
