// `yeto-host sample` of a structure family: the tests' tinyfold plugin emits a known five-atom
// structure in two samples through the structure_* outputs; the host writes mmCIF and / or PDB
// (one model per sample), which the host's parser reads back with the right atoms and
// coordinates. A plugin that breaks the contract is named with the tensor at fault, and nothing
// is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "structure/structure.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<std::string> args(const yeto::test::TempDir& tmp, const std::string& output, const std::string& prompt = "fold") {
  if (!fs::exists(tmp / "model/model_index.json")) tmp.write("model/model_index.json", R"({"_class_name": "TinyFoldPipeline"})");
  return {"sample", "--model", (tmp / "model").string(), "--prompt", prompt, "--output", output, "--seed", "3"};
}

// The coordinates tinyfold gives atom i of sample s for seed 3.
std::array<float, 3> expected(std::size_t s, std::size_t i) {
  return {static_cast<float>(i) + 0.5f * static_cast<float>(s) + 0.003f, -1.25f * static_cast<float>(i),
          10.f + static_cast<float>(s)};
}

void expect_tinyfold(const yeto::structure::Structure& s) {
  ASSERT_EQ(s.atoms.size(), 5u);
  ASSERT_EQ(s.models.size(), 2u);
  const char* names[] = {"N", "CA", "C4'", "O5'", "ZN"};
  const char* chains[] = {"A", "A", "B", "B", "C"};
  const int elements[] = {7, 6, 6, 8, 30};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(s.atoms[i].name, names[i]);
    EXPECT_EQ(s.atoms[i].chain, chains[i]);
    EXPECT_EQ(yeto::structure::atomic_number(s.atoms[i].element), elements[i]) << s.atoms[i].element;
    EXPECT_EQ(s.atoms[i].hetero, i == 4);
    EXPECT_EQ(s.atoms[i].residue_index, i == 4 ? 101 : 1);
    for (std::size_t m = 0; m < 2; ++m)
      for (std::size_t k = 0; k < 3; ++k) EXPECT_NEAR(s.models[m][i][k], expected(m, i)[k], 6e-4) << m << " " << i;
  }
  EXPECT_EQ(s.atoms[2].residue, "A");
  EXPECT_EQ(s.atoms[4].residue, "ZN");
}

}  // namespace

TEST(StructureSample, WritesMmcifThatReadsBack) {
  yeto::test::TempDir tmp;
  const auto r = yeto::test::run_host(args(tmp, (tmp / "fold.cif").string()));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_NE(r.out.find((tmp / "fold.cif").string()), std::string::npos) << r.all();
  EXPECT_NE(r.all().find("structure of 5 atoms, 2 model(s)"), std::string::npos) << r.all();
  const auto s = yeto::structure::read_structure(tmp / "fold.cif");
  expect_tinyfold(s);
  EXPECT_EQ(s.name, "fold");
  EXPECT_FALSE(fs::exists(tmp / "fold.pdb"));
  // The same seed gives the same bytes.
  ASSERT_EQ(yeto::test::run_host(args(tmp, (tmp / "again.cif").string())).exit_code, 0);
  const std::string a = yeto::test::read_text(tmp / "fold.cif"), b = yeto::test::read_text(tmp / "again.cif");
  EXPECT_EQ(a.substr(a.find("loop_")), b.substr(b.find("loop_"))) << "only the data block's name differs";
}

TEST(StructureSample, WritesPdbBothFormatsAndOneFilePerPrompt) {
  yeto::test::TempDir tmp;
  auto a = args(tmp, (tmp / "fold.pdb").string());
  a.insert(a.end(), {"--structure-format", "both", "--prompt", "second"});
  const auto r = yeto::test::run_host(a);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  for (const char* f : {"fold-000.pdb", "fold-000.cif", "fold-001.pdb", "fold-001.cif"}) {
    ASSERT_TRUE(fs::exists(tmp / f)) << f << "\n" << r.all();
    expect_tinyfold(yeto::structure::read_structure(tmp / f));
  }
  const std::string pdb = yeto::test::read_text(tmp / "fold-000.pdb");
  EXPECT_EQ(pdb.rfind("MODEL        1\nATOM      1  N   ALA A   1       0.003   0.000  10.000", 0), 0u) << pdb.substr(0, 200);
}

TEST(StructureSample, RefusesWhatDoesNotFitAStructure) {
  yeto::test::TempDir tmp;
  auto a = args(tmp, (tmp / "fold.cif").string());
  a.insert(a.end(), {"--structure-format", "pdb"});
  auto r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("the output must end in .pdb (or use both)"), std::string::npos) << r.all();
  a = args(tmp, (tmp / "fold.png").string());
  a.insert(a.end(), {"--structure-format", "both"});
  r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("is no structure; end it in .cif or .pdb"), std::string::npos) << r.all();
  a = args(tmp, (tmp / "fold.cif").string());
  a.insert(a.end(), {"--grid", (tmp / "grid.png").string()});
  r = yeto::test::run_host(a);
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_NE(r.all().find("a structure output"), std::string::npos) << r.all();
  // A structure asked to be written as an image.
  r = yeto::test::run_host(args(tmp, (tmp / "fold.png").string()));
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_NE(r.all().find("generated a structure ('structure_coordinates'); write it as .cif or .pdb"), std::string::npos)
      << r.all();
  EXPECT_FALSE(fs::exists(tmp / "fold.png"));
  EXPECT_FALSE(fs::exists(tmp / "fold.cif"));
}

TEST(StructureSample, ABrokenContractNamesTheTensor) {
  yeto::test::TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nan", "output 'structure_coordinates' sample 1, atom 3 (O5'): a coordinate is nan"},
      {"no-names", "output 'structure_atom_name' is missing"},
      {"bad-shape", "output 'structure_coordinates' must be float [S samples, N atoms, 3] with S, N >= 1, got Float [2, 5, 2]"},
      {"bad-element", "output 'structure_element' atom 4: atomic number 200 is outside 0..118"},
      {"bad-name", "output 'structure_atom_name' atom 1: byte 1 (32) is not printable ASCII"},
  };
  for (const auto& [prompt, message] : cases) {
    const auto r = yeto::test::run_host(args(tmp, (tmp / (prompt + ".cif")).string(), prompt));
    EXPECT_EQ(r.exit_code, 1) << prompt << "\n" << r.all();
    EXPECT_NE(r.all().find("plugin 'tinyfold' " + message), std::string::npos) << prompt << "\n" << r.all();
    EXPECT_FALSE(fs::exists(tmp / (prompt + ".cif"))) << prompt;
  }
}

TEST(StructureSample, APluginGetsADirectoryForItsOwnFiles) {
  yeto::test::TempDir tmp;
  const auto r = yeto::test::run_host(args(tmp, (tmp / "out/fold.cif").string(), "output-dir"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_EQ(yeto::test::read_text(tmp / "out/fold/tinyfold.txt"), "output-dir\n");
  expect_tinyfold(yeto::structure::read_structure(tmp / "out/fold.cif"));
}
