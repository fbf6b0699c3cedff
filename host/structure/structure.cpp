#include "structure/structure.hpp"

#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace yeto::structure {
namespace {

constexpr const char* kElements[] = {
    "H",  "He", "Li", "Be", "B",  "C",  "N",  "O",  "F",  "Ne", "Na", "Mg", "Al", "Si", "P",  "S",  "Cl", "Ar",
    "K",  "Ca", "Sc", "Ti", "V",  "Cr", "Mn", "Fe", "Co", "Ni", "Cu", "Zn", "Ga", "Ge", "As", "Se", "Br", "Kr",
    "Rb", "Sr", "Y",  "Zr", "Nb", "Mo", "Tc", "Ru", "Rh", "Pd", "Ag", "Cd", "In", "Sn", "Sb", "Te", "I",  "Xe",
    "Cs", "Ba", "La", "Ce", "Pr", "Nd", "Pm", "Sm", "Eu", "Gd", "Tb", "Dy", "Ho", "Er", "Tm", "Yb", "Lu", "Hf",
    "Ta", "W",  "Re", "Os", "Ir", "Pt", "Au", "Hg", "Tl", "Pb", "Bi", "Po", "At", "Rn", "Fr", "Ra", "Ac", "Th",
    "Pa", "U",  "Np", "Pu", "Am", "Cm", "Bk", "Cf", "Es", "Fm", "Md", "No", "Lr", "Rf", "Db", "Sg", "Bh", "Hs",
    "Mt", "Ds", "Rg", "Cn", "Nh", "Fl", "Mc", "Lv", "Ts", "Og"};
constexpr int kElementCount = static_cast<int>(sizeof kElements / sizeof kElements[0]);

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string extension(const std::filesystem::path& path) { return lower(path.extension().string()); }

}  // namespace

std::string chain_id(std::int64_t index) {
  if (index < 0) throw std::invalid_argument("chain index " + std::to_string(index) + " is negative");
  std::string id;
  std::int64_t n = index + 1;  // bijective base 26: A = 1, ..., Z = 26, AA = 27
  while (n > 0) {
    const std::int64_t r = (n - 1) % 26;
    id.insert(id.begin(), static_cast<char>('A' + r));
    n = (n - 1) / 26;
  }
  return id;
}

std::string element_symbol(std::int64_t z) {
  if (z < 0 || z > kElementCount)
    throw std::invalid_argument("atomic number " + std::to_string(z) + " is outside 0..118");
  return z == 0 ? std::string() : std::string(kElements[z - 1]);
}

int atomic_number(const std::string& symbol) {
  const std::string s = lower(symbol);
  for (int i = 0; i < kElementCount; ++i)
    if (lower(kElements[i]) == s) return i + 1;
  return 0;
}

void validate(const Structure& s) {
  if (s.models.empty()) throw std::invalid_argument("the structure has no model (no coordinates)");
  for (std::size_t m = 0; m < s.models.size(); ++m) {
    if (s.models[m].size() != s.atoms.size())
      throw std::invalid_argument("model " + std::to_string(m + 1) + " has " + std::to_string(s.models[m].size()) +
                                  " coordinates for " + std::to_string(s.atoms.size()) + " atoms");
    for (std::size_t i = 0; i < s.models[m].size(); ++i)
      for (float v : s.models[m][i])
        if (!std::isfinite(v))
          throw std::invalid_argument("model " + std::to_string(m + 1) + ", atom " + std::to_string(i + 1) +
                                      ": a coordinate is not finite");
  }
  for (std::size_t i = 0; i < s.atoms.size(); ++i) {
    const Atom& a = s.atoms[i];
    const std::string which = "atom " + std::to_string(i + 1);
    if (a.name.empty()) throw std::invalid_argument(which + " has no name");
    if (a.residue.empty()) throw std::invalid_argument(which + " (" + a.name + ") has no residue name");
    if (a.chain.empty()) throw std::invalid_argument(which + " (" + a.name + ") has no chain");
    if (a.residue_index < 1)
      throw std::invalid_argument(which + " (" + a.name + "): residue index " + std::to_string(a.residue_index) +
                                  " is below 1");
    for (const std::string* f : {&a.name, &a.residue, &a.chain, &a.element})
      for (char c : *f)
        if (static_cast<unsigned char>(c) <= ' ' || static_cast<unsigned char>(c) >= 127)
          throw std::invalid_argument(which + ": '" + *f + "' holds a space or a non-printable character");
  }
}

void write_structure(const std::filesystem::path& path, const Structure& s) {
  const std::string ext = extension(path);
  std::string text;
  try {
    if (ext == ".cif" || ext == ".mmcif") {
      text = mmcif_text(s);
    } else if (ext == ".pdb") {
      text = pdb_text(s);
    } else {
      throw Error(path.string() + ": a structure is written as .cif / .mmcif (mmCIF) or .pdb, not '" + ext + "'",
                  ExitCode::bad_input);
    }
  } catch (const std::invalid_argument& e) {
    throw Error(path.string() + ": " + e.what(), ExitCode::bad_input);
  }
  atomic_write(path, text);
}

Structure read_structure(const std::filesystem::path& path) {
  const std::string ext = extension(path);
  if (ext != ".cif" && ext != ".mmcif" && ext != ".pdb" && ext != ".ent")
    throw Error(path.string() + ": a structure is read from .cif / .mmcif (mmCIF) or .pdb / .ent, not '" + ext + "'",
                ExitCode::bad_input);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open", ExitCode::not_found);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return ext == ".pdb" || ext == ".ent" ? parse_pdb(bytes.str(), path.string()) : parse_mmcif(bytes.str(), path.string());
}

}  // namespace yeto::structure
