// tinyfold, the tests' structure plugin: its generate emits a small known structure through the
// host's structure contract, so `yeto-host sample` writes it as mmCIF / PDB. Five atoms: N and
// CA of ALA 1 in chain 0, C4' and O5' of the RNA nucleotide A 1 in chain 1, and a zinc ion
// (hetero) as residue 101 of chain 2; atom i of sample s sits at
//   (i + 0.5 s + seed / 1000, -1.25 i, 10 + s)   for S = 2 samples.
// A prompt naming a defect makes it break the contract on purpose: "nan" (a NaN coordinate),
// "no-names" (no structure_atom_name), "bad-shape" (coordinates [S, N, 2]), "bad-element"
// (atomic number 200), "bad-name" (a space inside an atom name); "output-dir" also writes a
// file named after the prompt into the request's output_dir.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>
#include <yeto/plugin.hpp>

namespace {

using nlohmann::json;
using yeto::sdk::NamedTensors;

torch::Tensor ascii(const std::vector<std::string>& names, std::int64_t width) {
  auto t = torch::zeros({static_cast<std::int64_t>(names.size()), width}, torch::kUInt8);
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t k = 0; k < names[i].size(); ++k)
      t[static_cast<std::int64_t>(i)][static_cast<std::int64_t>(k)] = static_cast<std::uint8_t>(names[i][k]);
  return t;
}

class TinyFoldPlugin : public yeto::sdk::Plugin {
 public:
  NamedTensors generate(const std::string& request_json, const NamedTensors&) override {
    const json r = json::parse(request_json);
    const std::string prompt = r.at("prompts").at(0).get<std::string>();
    const double seed = static_cast<double>(r.value("seed", std::uint64_t{0}));
    const std::int64_t S = 2, N = 5;
    auto coords = torch::zeros({S, N, 3}, torch::kFloat);
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t i = 0; i < N; ++i) {
        coords[s][i][0] = static_cast<double>(i) + 0.5 * static_cast<double>(s) + seed / 1000.0;
        coords[s][i][1] = -1.25 * static_cast<double>(i);
        coords[s][i][2] = 10.0 + static_cast<double>(s);
      }
    std::vector<std::string> names = {"N", "CA", "C4'", "O5'", "ZN"};
    if (prompt == "bad-name") names[1] = "C A";
    if (prompt == "nan") coords[1][3][2] = std::numeric_limits<float>::quiet_NaN();
    if (prompt == "bad-shape") coords = coords.narrow(2, 0, 2).contiguous();
    if (prompt == "output-dir") {
      const std::filesystem::path dir = r.at("output_dir").get<std::string>();
      std::filesystem::create_directories(dir);
      std::ofstream(dir / "tinyfold.txt") << prompt << "\n";
    }
    NamedTensors out = {{"structure_coordinates", coords},
                        {"structure_element", torch::tensor({7, 6, 6, 8, prompt == "bad-element" ? 200 : 30}, torch::kLong)},
                        {"structure_residue_name", ascii({"ALA", "ALA", "A", "A", "ZN"}, 3)},
                        {"structure_residue_index", torch::tensor({1, 1, 1, 1, 101}, torch::kLong)},
                        {"structure_chain_index", torch::tensor({0, 0, 1, 1, 2}, torch::kLong)},
                        {"structure_is_hetero", torch::tensor({0, 0, 0, 0, 1}, torch::kUInt8)}};
    if (prompt != "no-names") out.emplace_back("structure_atom_name", ascii(names, 4));
    return out;
  }
};

}  // namespace

YETO_PLUGIN(TinyFoldPlugin)
