// The mmCIF and PDB writers and parsers: round trips of several models (names with primes,
// ligands, many chains), the fixed PDB columns, what the PDB format cannot hold, hand-written
// files in the archive's layouts, and bad input named by line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "structure/structure.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using yeto::structure::Atom;
using yeto::structure::Structure;

namespace {

const fs::path kFixtures = fs::path(YETO_TEST_FIXTURES) / "structure";

// Two chains (a protein residue, an RNA nucleotide with primed names) and a zinc ion, two models.
Structure small() {
  Structure s;
  s.name = "tiny fold";
  auto add = [&](std::string name, std::string el, std::string res, std::string chain, std::int64_t seq, bool het) {
    Atom a;
    a.name = std::move(name);
    a.element = std::move(el);
    a.residue = std::move(res);
    a.chain = std::move(chain);
    a.residue_index = seq;
    a.hetero = het;
    s.atoms.push_back(a);
  };
  add("N", "N", "ALA", "A", 1, false);
  add("CA", "C", "ALA", "A", 1, false);
  add("C4'", "C", "A", "B", 1, false);
  add("O5'", "O", "A", "B", 1, false);
  add("ZN", "Zn", "ZN", "C", 1, true);
  for (int m = 0; m < 2; ++m) {
    yeto::structure::Coordinates c;
    for (std::size_t i = 0; i < s.atoms.size(); ++i)
      c.push_back({1.5f * static_cast<float>(i) + static_cast<float>(m), -2.25f * static_cast<float>(i), 100.125f - static_cast<float>(m * i)});
    s.models.push_back(c);
  }
  return s;
}

void expect_same(const Structure& a, const Structure& b, bool element_case_free = false) {
  ASSERT_EQ(a.atoms.size(), b.atoms.size());
  ASSERT_EQ(a.models.size(), b.models.size());
  for (std::size_t i = 0; i < a.atoms.size(); ++i) {
    EXPECT_EQ(a.atoms[i].name, b.atoms[i].name) << i;
    EXPECT_EQ(a.atoms[i].residue, b.atoms[i].residue) << i;
    EXPECT_EQ(a.atoms[i].chain, b.atoms[i].chain) << i;
    EXPECT_EQ(a.atoms[i].residue_index, b.atoms[i].residue_index) << i;
    EXPECT_EQ(a.atoms[i].hetero, b.atoms[i].hetero) << i;
    if (element_case_free)
      EXPECT_EQ(yeto::structure::atomic_number(a.atoms[i].element), yeto::structure::atomic_number(b.atoms[i].element)) << i;
    else
      EXPECT_EQ(a.atoms[i].element, b.atoms[i].element) << i;
  }
  for (std::size_t m = 0; m < a.models.size(); ++m)
    for (std::size_t i = 0; i < a.atoms.size(); ++i)
      for (int k = 0; k < 3; ++k) EXPECT_NEAR(a.models[m][i][k], b.models[m][i][k], 5e-4) << m << " " << i << " " << k;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const yeto::Error& e) {
    EXPECT_EQ(e.code(), yeto::ExitCode::bad_input);
    return e.what();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace

TEST(Structure, ChainIdsAndElements) {
  using yeto::structure::chain_id;
  EXPECT_EQ(chain_id(0), "A");
  EXPECT_EQ(chain_id(25), "Z");
  EXPECT_EQ(chain_id(26), "AA");
  EXPECT_EQ(chain_id(27), "AB");
  EXPECT_EQ(chain_id(51), "AZ");
  EXPECT_EQ(chain_id(52), "BA");
  EXPECT_EQ(chain_id(26 + 26 * 26), "AAA");
  EXPECT_THROW(chain_id(-1), std::invalid_argument);
  EXPECT_EQ(yeto::structure::element_symbol(6), "C");
  EXPECT_EQ(yeto::structure::element_symbol(26), "Fe");
  EXPECT_EQ(yeto::structure::element_symbol(118), "Og");
  EXPECT_EQ(yeto::structure::element_symbol(0), "");
  EXPECT_THROW(yeto::structure::element_symbol(119), std::invalid_argument);
  EXPECT_EQ(yeto::structure::atomic_number("FE"), 26);
  EXPECT_EQ(yeto::structure::atomic_number("zn"), 30);
  EXPECT_EQ(yeto::structure::atomic_number("X"), 0);
  for (int z = 1; z <= 118; ++z) EXPECT_EQ(yeto::structure::atomic_number(yeto::structure::element_symbol(z)), z);
}

TEST(Structure, MmcifRoundTripsModelsAndQuotesPrimes) {
  const Structure s = small();
  const std::string text = yeto::structure::mmcif_text(s);
  EXPECT_EQ(text.rfind("data_tiny_fold\n", 0), 0u) << text.substr(0, 40);
  EXPECT_NE(text.find(" \"C4'\" "), std::string::npos) << "a name with a prime is double-quoted";
  EXPECT_NE(text.find("HETATM 5 Zn ZN . ZN C 3 1 ? "), std::string::npos) << text;
  EXPECT_NE(text.find(" 2\n"), std::string::npos) << "the second model is numbered 2";
  const Structure back = yeto::structure::parse_mmcif(text, "written");
  expect_same(s, back);
  EXPECT_EQ(back.name, "tiny_fold");
  EXPECT_EQ(yeto::structure::mmcif_text(back), text) << "writing what was read gives the same bytes";
}

TEST(Structure, PdbRoundTripsWithFixedColumns) {
  const Structure s = small();
  const std::string text = yeto::structure::pdb_text(s);
  std::vector<std::string> lines;
  for (std::size_t p = 0, e; (e = text.find('\n', p)) != std::string::npos; p = e + 1) lines.push_back(text.substr(p, e - p));
  ASSERT_GE(lines.size(), 10u);
  EXPECT_EQ(lines[0], "MODEL        1");
  // Atom 2 (CA of ALA 1, chain A) of model 1: every column where the format puts it.
  const std::string& ca = lines[2];
  ASSERT_EQ(ca.size(), 80u) << ca;
  EXPECT_EQ(ca.substr(0, 6), "ATOM  ");
  EXPECT_EQ(ca.substr(6, 5), "    2");
  EXPECT_EQ(ca.substr(12, 4), " CA ");
  EXPECT_EQ(ca.substr(17, 3), "ALA");
  EXPECT_EQ(ca.substr(21, 1), "A");
  EXPECT_EQ(ca.substr(22, 4), "   1");
  EXPECT_EQ(ca.substr(30, 8), "   1.500");
  EXPECT_EQ(ca.substr(38, 8), "  -2.250");
  EXPECT_EQ(ca.substr(46, 8), " 100.125");
  EXPECT_EQ(ca.substr(54, 6), "  1.00");
  EXPECT_EQ(ca.substr(76, 2), " C");
  EXPECT_EQ(lines[3], "TER       3      ALA A   1");
  EXPECT_EQ(lines[1].substr(30, 24), "   0.000   0.000 100.125") << "-0 is written as 0";
  EXPECT_EQ(lines[4].substr(12, 4), " C4'");
  const std::string& zn = lines[7];
  EXPECT_EQ(zn.substr(0, 6), "HETATM");
  EXPECT_EQ(zn.substr(12, 4), "ZN  ") << "a two-letter element's name starts in column 13";
  EXPECT_EQ(zn.substr(76, 2), "ZN");
  EXPECT_NE(text.find("ENDMDL\nMODEL        2\n"), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 11), "ENDMDL\nEND\n");
  expect_same(s, yeto::structure::parse_pdb(text, "written"), true);

  Structure one = s;
  one.models.resize(1);
  const std::string single = yeto::structure::pdb_text(one);
  EXPECT_EQ(single.find("MODEL"), std::string::npos) << "one model needs no MODEL record";
  expect_same(one, yeto::structure::parse_pdb(single, "written"), true);
}

TEST(Structure, PdbRefusesWhatItsColumnsCannotHold) {
  Structure s = small();
  s.models.resize(1);
  Structure chains = s;
  chains.atoms[4].chain = "AA";
  EXPECT_NE(error_of([&] { yeto::structure::pdb_text(chains); }).find("chain ids are one character"), std::string::npos);
  Structure residues = s;
  residues.atoms[0].residue_index = 10000;
  EXPECT_NE(error_of([&] { yeto::structure::pdb_text(residues); }).find("9999"), std::string::npos);
  Structure far = s;
  far.models[0][3][1] = -1000.f;
  EXPECT_NE(error_of([&] { yeto::structure::pdb_text(far); }).find("does not fit the 8 columns"), std::string::npos);
  Structure many;
  many.atoms.assign(100000, s.atoms[0]);
  many.models.assign(1, yeto::structure::Coordinates(100000, {0.f, 0.f, 0.f}));
  EXPECT_NE(error_of([&] { yeto::structure::pdb_text(many); }).find("99999 serial numbers"), std::string::npos);
  // mmCIF holds all of them.
  chains.atoms[0].residue_index = 10000;
  expect_same(chains, yeto::structure::parse_mmcif(yeto::structure::mmcif_text(chains), "written"));
  EXPECT_EQ(yeto::structure::parse_mmcif(yeto::structure::mmcif_text(many), "written").atoms.size(), 100000u);
}

TEST(Structure, ValidateNamesTheInconsistency) {
  Structure s = small();
  s.models[1].pop_back();
  EXPECT_NE(error_of([&] { yeto::structure::mmcif_text(s); }).find("model 2 has 4 coordinates for 5 atoms"), std::string::npos);
  s = small();
  s.models[0][2][0] = std::nanf("");
  EXPECT_NE(error_of([&] { yeto::structure::pdb_text(s); }).find("atom 3: a coordinate is not finite"), std::string::npos);
  s = small();
  s.atoms[1].residue_index = 0;
  EXPECT_NE(error_of([&] { yeto::structure::mmcif_text(s); }).find("residue index 0"), std::string::npos);
  s = small();
  s.models.clear();
  EXPECT_NE(error_of([&] { yeto::structure::mmcif_text(s); }).find("no model"), std::string::npos);
}

TEST(Structure, WriteAndReadFilesByExtension) {
  yeto::test::TempDir dir;
  const Structure s = small();
  for (const char* name : {"a.cif", "b.mmcif", "c.pdb"}) {
    yeto::structure::write_structure(dir / name, s);
    expect_same(s, yeto::structure::read_structure(dir / name), true);
  }
  EXPECT_NE(error_of([&] { yeto::structure::write_structure(dir / "d.xyz", s); }).find("'.xyz'"), std::string::npos);
  Structure bad = s;
  bad.atoms[0].chain = "AB";
  EXPECT_NE(error_of([&] { yeto::structure::write_structure(dir / "e.pdb", bad); }).find("e.pdb: atom 1"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "e.pdb")) << "a refused structure leaves no file";
}

TEST(Structure, ReadsTheArchiveLayoutOfMmcif) {
  const Structure s = yeto::structure::read_structure(kFixtures / "dna_ligand.cif");
  EXPECT_EQ(s.name, "1ABC");
  ASSERT_EQ(s.atoms.size(), 5u);
  ASSERT_EQ(s.models.size(), 2u);
  EXPECT_EQ(s.atoms[1].name, "O5'");
  EXPECT_EQ(s.atoms[2].name, "C4'");
  EXPECT_EQ(s.atoms[2].residue, "DC");
  EXPECT_FLOAT_EQ(s.atoms[2].occupancy, 0.5f);
  EXPECT_FLOAT_EQ(s.atoms[2].b_factor, 0.f) << "'?' B-factor: the default";
  EXPECT_FLOAT_EQ(s.atoms[1].b_factor, 21.f);
  EXPECT_EQ(s.atoms[3].residue_index, 2);
  EXPECT_EQ(s.atoms[4].residue_index, 101) << "label_seq_id '.': auth_seq_id";
  EXPECT_EQ(s.atoms[4].chain, "B");
  EXPECT_EQ(s.atoms[4].element, "ZN");
  EXPECT_TRUE(s.atoms[4].hetero);
  EXPECT_FALSE(s.atoms[0].hetero);
  EXPECT_FLOAT_EQ(s.models[0][0][0], 12.345f) << "a standard uncertainty '(6)' is dropped";
  EXPECT_FLOAT_EQ(s.models[1][4][2], -0.9f);
  EXPECT_FLOAT_EQ(s.models[1][0][2], 7.1f);
}

TEST(Structure, ReadsPdbAsTheArchiveWritesIt) {
  const Structure s = yeto::structure::read_structure(kFixtures / "crambin_head.pdb");
  ASSERT_EQ(s.atoms.size(), 5u);
  ASSERT_EQ(s.models.size(), 1u);
  EXPECT_EQ(s.atoms[1].name, "CA");
  EXPECT_EQ(s.atoms[1].element, "C");
  EXPECT_EQ(s.atoms[3].name, "OG1");
  EXPECT_EQ(s.atoms[3].element, "O") << "no element columns: from the name's columns";
  EXPECT_FLOAT_EQ(s.atoms[3].b_factor, 12.06f);
  EXPECT_EQ(s.atoms[4].name, "FE");
  EXPECT_EQ(s.atoms[4].element, "Fe");
  EXPECT_EQ(s.atoms[4].residue, "HEM");
  EXPECT_EQ(s.atoms[4].chain, "B");
  EXPECT_EQ(s.atoms[4].residue_index, 201);
  EXPECT_TRUE(s.atoms[4].hetero);
  EXPECT_FLOAT_EQ(s.atoms[4].occupancy, 0.75f);
  EXPECT_FLOAT_EQ(s.models[0][4][2], -12.125f);
  EXPECT_FLOAT_EQ(s.models[0][0][0], 17.047f);
}

TEST(Structure, MmcifSingleAtomAsItemsAndTextFields) {
  const std::string text =
      "data_one\n_atom_site.group_PDB HETATM\n_atom_site.label_atom_id\n;O1'\n;\n_atom_site.label_comp_id 'H O H'\n"
      "_atom_site.auth_asym_id W\n_atom_site.auth_seq_id 7\n_atom_site.Cartn_x 1\n_atom_site.Cartn_y 2.5\n"
      "_atom_site.Cartn_z -3e1\n";
  const Structure s = yeto::structure::parse_mmcif(text, "one.cif");
  ASSERT_EQ(s.atoms.size(), 1u);
  EXPECT_EQ(s.atoms[0].name, "O1'");
  EXPECT_EQ(s.atoms[0].residue, "H O H");
  EXPECT_EQ(s.atoms[0].chain, "W");
  EXPECT_EQ(s.atoms[0].residue_index, 7);
  EXPECT_EQ(s.atoms[0].element, "");
  EXPECT_FLOAT_EQ(s.models[0][0][2], -30.f);
}

TEST(Structure, BadMmcifIsNamedByLine) {
  auto err = [](const std::string& text) { return error_of([&] { yeto::structure::parse_mmcif(text, "bad.cif"); }); };
  const std::string head = "data_x\nloop_\n_atom_site.label_atom_id\n_atom_site.label_comp_id\n_atom_site.label_asym_id\n"
                           "_atom_site.label_seq_id\n_atom_site.Cartn_x\n_atom_site.Cartn_y\n_atom_site.Cartn_z\n";
  EXPECT_NE(err(head + "CA ALA A 1 1 2 3\nCB ALA A 1 1 2\n").find("bad.cif:2: the loop of _atom_site has 13 values, not a multiple of its 7 columns"),
            std::string::npos);
  EXPECT_NE(err(head + "CA ALA A 1 1 2 3\nCB ALA A 1 x 2 3\n").find("bad.cif:11: atom_site Cartn_x 'x' is not a finite number"),
            std::string::npos);
  EXPECT_NE(err(head + "CA ALA A one 1 2 3\n").find("bad.cif:10: atom_site residue number 'one' is not an integer"),
            std::string::npos);
  EXPECT_NE(err(head + "\"CA ALA A 1 1 2 3\n").find("bad.cif:10: a double-quoted value is not closed"), std::string::npos);
  EXPECT_NE(err(head + ";CA\nALA A 1 1 2 3\n").find("bad.cif:10: a ';' text field is not closed"), std::string::npos);
  EXPECT_NE(err(head + "? ALA A 1 1 2 3\n").find("bad.cif:10: atom_site row: no atom name"), std::string::npos);
  EXPECT_NE(err("data_x\nloop_\n_atom_site.label_atom_id\n_atom_site.Cartn_x\nCA 1\n").find("bad.cif:2: _atom_site needs Cartn_x, Cartn_y and Cartn_z"),
            std::string::npos);
  EXPECT_NE(err("data_x\n_cell.length_a 10\n").find("bad.cif: no _atom_site category"), std::string::npos);
  EXPECT_NE(err("loop_\n").find("bad.cif:1: 'loop_' before the first data_ block"), std::string::npos);
  EXPECT_NE(err("").find("no data_ block"), std::string::npos);
  EXPECT_NE(err("data_x\n_cell.length_a\n_cell.length_b 3\n").find("bad.cif:2: tag '_cell.length_a' has no value"),
            std::string::npos);
  EXPECT_NE(err("data_x\nstray\n").find("bad.cif:2: value 'stray' has no tag"), std::string::npos);
  const std::string two_models = head;
  std::string models = "data_x\nloop_\n_atom_site.label_atom_id\n_atom_site.label_comp_id\n_atom_site.label_asym_id\n"
                       "_atom_site.label_seq_id\n_atom_site.Cartn_x\n_atom_site.Cartn_y\n_atom_site.Cartn_z\n"
                       "_atom_site.pdbx_PDB_model_num\nCA ALA A 1 1 2 3 1\nCB ALA A 1 1 2 3 1\nCA ALA A 1 1 2 3 2\n";
  EXPECT_NE(err(models).find("model 2 lists 1 atoms, model 1 lists 2"), std::string::npos);
}

TEST(Structure, BadPdbIsNamedByLine) {
  auto err = [](const std::string& text) { return error_of([&] { yeto::structure::parse_pdb(text, "bad.pdb"); }); };
  const std::string good = "ATOM      1  CA  ALA A   1       1.000   2.000   3.000  1.00  0.00           C  \n";
  EXPECT_NE(err("HEADER x\n" + good.substr(0, 40) + "\n").find("bad.pdb:2: ATOM record of 40 characters"), std::string::npos);
  std::string bad_x = good;
  bad_x.replace(30, 8, "   1.0x0");
  EXPECT_NE(err(bad_x).find("bad.pdb:1: x (columns 31-38) '1.0x0' is not a number"), std::string::npos);
  std::string bad_seq = good;
  bad_seq.replace(22, 4, "  a1");
  EXPECT_NE(err(bad_seq).find("bad.pdb:1: residue number (columns 23-26) 'a1' is not an integer"), std::string::npos);
  EXPECT_NE(err("MODEL 1\n" + good + "ENDMDL\nMODEL 2\nENDMDL\n").find("bad.pdb:5: model 2 has 0 atoms, the first model 1"),
            std::string::npos);
  EXPECT_NE(err("MODEL 1\n" + good).find("the last MODEL has no ENDMDL"), std::string::npos);
  EXPECT_NE(err("HEADER x\n").find("no ATOM or HETATM record"), std::string::npos);
}
