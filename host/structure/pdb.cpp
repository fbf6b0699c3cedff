// PDB: fixed-column ATOM / HETATM records (format v3.3) written and read.
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "core/error.hpp"
#include "structure/structure.hpp"

namespace yeto::structure {
namespace {

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(' ') - b + 1);
}

// Columns 13-16: a name under 4 characters of a one-letter element starts in column 14.
std::string name_field(const Atom& a) {
  if (a.name.size() < 4 && upper(a.element).size() <= 1) return " " + a.name + std::string(3 - a.name.size(), ' ');
  return a.name + std::string(4 - a.name.size(), ' ');
}

// -0.0001 would print as "-0.000": what rounds to zero is written as zero.
double column(float v, double half_unit) { return std::fabs(v) < half_unit ? 0.0 : static_cast<double>(v); }

}  // namespace

std::string pdb_text(const Structure& s) {
  validate(s);
  for (std::size_t i = 0; i < s.atoms.size(); ++i) {
    const Atom& a = s.atoms[i];
    const std::string which = "atom " + std::to_string(i + 1) + " (" + a.name + " " + a.residue + " " + a.chain +
                              std::to_string(a.residue_index) + "): ";
    if (a.name.size() > 4) throw std::invalid_argument(which + "PDB atom names have at most 4 characters");
    if (a.residue.size() > 3) throw std::invalid_argument(which + "PDB residue names have at most 3 characters");
    if (a.chain.size() != 1)
      throw std::invalid_argument(which + "PDB chain ids are one character (at most 26 chains here)");
    if (a.residue_index > 9999) throw std::invalid_argument(which + "PDB residue numbers stop at 9999");
    if (a.element.size() > 2) throw std::invalid_argument(which + "PDB element symbols have at most 2 characters");
    if (a.occupancy < 0 || a.occupancy > 999.99 || a.b_factor < -99.99f || a.b_factor > 999.99f)
      throw std::invalid_argument(which + "occupancy or B-factor does not fit its 6 columns");
  }
  std::size_t chains = 0;
  for (std::size_t i = 0; i < s.atoms.size(); ++i)
    if (i + 1 == s.atoms.size() || s.atoms[i + 1].chain != s.atoms[i].chain) ++chains;
  if (s.atoms.size() + chains > 99999)
    throw std::invalid_argument(std::to_string(s.atoms.size()) + " atoms and " + std::to_string(chains) +
                                " TER records need more than the 99999 serial numbers of the PDB format");
  std::string out;
  char line[256];
  for (std::size_t m = 0; m < s.models.size(); ++m) {
    if (s.models.size() > 1) {
      std::snprintf(line, sizeof line, "MODEL     %4zu\n", m + 1);
      out += line;
    }
    int serial = 0;
    for (std::size_t i = 0; i < s.atoms.size(); ++i) {
      const Atom& a = s.atoms[i];
      const auto& x = s.models[m][i];
      for (float v : x)
        if (v < -999.999f || v > 9999.999f)
          throw std::invalid_argument("model " + std::to_string(m + 1) + ", atom " + std::to_string(i + 1) + " (" +
                                      a.name + "): coordinate " + std::to_string(v) +
                                      " does not fit the 8 columns of the PDB format");
      std::snprintf(line, sizeof line, "%-6s%5d %4s %3s %1s%4lld    %8.3f%8.3f%8.3f%6.2f%6.2f          %2s  \n",
                    a.hetero ? "HETATM" : "ATOM", ++serial, name_field(a).c_str(), a.residue.c_str(), a.chain.c_str(),
                    static_cast<long long>(a.residue_index), column(x[0], 5e-4), column(x[1], 5e-4), column(x[2], 5e-4),
                    column(a.occupancy, 5e-3), column(a.b_factor, 5e-3),
                    upper(a.element).c_str());
      out += line;
      if (i + 1 == s.atoms.size() || s.atoms[i + 1].chain != a.chain) {
        std::snprintf(line, sizeof line, "TER   %5d      %3s %1s%4lld\n", ++serial, a.residue.c_str(), a.chain.c_str(),
                      static_cast<long long>(a.residue_index));
        out += line;
      }
    }
    if (s.models.size() > 1) out += "ENDMDL\n";
  }
  return out + "END\n";
}

Structure parse_pdb(const std::string& text, const std::string& where) {
  auto fail = [&](int line, const std::string& what) {
    throw Error(where + ":" + std::to_string(line) + ": " + what, ExitCode::bad_input);
  };
  Structure s;
  s.name = "structure";
  bool in_model = false, explicit_models = false;
  std::size_t start = 0;
  int n = 0;
  Coordinates current;
  std::vector<int> model_lines;
  auto close_model = [&](int line) {
    if (s.models.empty()) {
      if (current.empty()) fail(line, "the model has no ATOM or HETATM record");
    } else if (current.size() != s.atoms.size()) {
      fail(line, "model " + std::to_string(s.models.size() + 1) + " has " + std::to_string(current.size()) +
                     " atoms, the first model " + std::to_string(s.atoms.size()));
    }
    s.models.push_back(std::move(current));
    current.clear();
  };
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string l = text.substr(start, end - start);
    start = end + 1;
    ++n;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    const std::string record = trim(l.substr(0, 6));
    if (record == "MODEL") {
      if (in_model) fail(n, "MODEL inside a model (no ENDMDL before it)");
      if (!explicit_models && !current.empty()) fail(n, "MODEL after atoms outside any model");
      in_model = explicit_models = true;
      continue;
    }
    if (record == "ENDMDL") {
      if (!in_model) fail(n, "ENDMDL without MODEL");
      close_model(n);
      in_model = false;
      continue;
    }
    if (record == "END") break;
    if (record != "ATOM" && record != "HETATM") continue;
    if (explicit_models && !in_model) fail(n, record + " outside MODEL / ENDMDL");
    if (l.size() < 54)
      fail(n, record + " record of " + std::to_string(l.size()) + " characters: columns 1-54 (through z) are required");
    auto real = [&](std::size_t col, std::size_t width, const char* what) {
      const std::string f = trim(l.substr(col, width));
      errno = 0;
      char* e = nullptr;
      const double v = std::strtod(f.c_str(), &e);
      if (f.empty() || e != f.c_str() + f.size() || errno == ERANGE || !std::isfinite(v))
        fail(n, std::string(what) + " (columns " + std::to_string(col + 1) + "-" + std::to_string(col + width) + ") '" +
                    f + "' is not a number");
      return v;
    };
    const std::array<float, 3> xyz{static_cast<float>(real(30, 8, "x")), static_cast<float>(real(38, 8, "y")),
                                   static_cast<float>(real(46, 8, "z"))};
    current.push_back(xyz);
    if (!s.models.empty()) continue;  // atoms come from the first model
    Atom a;
    a.hetero = record == "HETATM";
    a.name = trim(l.substr(12, 4));
    a.residue = trim(l.substr(17, 3));
    a.chain = trim(l.substr(21, 1));
    if (a.name.empty()) fail(n, "no atom name (columns 13-16)");
    if (a.residue.empty()) fail(n, "no residue name (columns 18-20)");
    if (a.chain.empty()) a.chain = "A";  // a blank chain id (old single-chain files)
    const std::string seq = trim(l.substr(22, 4));
    char* e = nullptr;
    errno = 0;
    const long long r = std::strtoll(seq.c_str(), &e, 10);
    if (seq.empty() || e != seq.c_str() + seq.size() || errno == ERANGE)
      fail(n, "residue number (columns 23-26) '" + seq + "' is not an integer");
    a.residue_index = r;
    if (l.size() >= 60 && !trim(l.substr(54, 6)).empty()) a.occupancy = static_cast<float>(real(54, 6, "occupancy"));
    if (l.size() >= 66 && !trim(l.substr(60, 6)).empty()) a.b_factor = static_cast<float>(real(60, 6, "B-factor"));
    if (l.size() >= 78) a.element = trim(l.substr(76, 2));
    if (a.element.empty()) {
      // Columns 13-14 hold the element right-justified when the name starts in column 14.
      const std::string lead = l.substr(12, 2);
      std::string guess;
      for (char c : lead)
        if (std::isalpha(static_cast<unsigned char>(c))) guess += c;
      if (lead[0] == ' ' || std::isdigit(static_cast<unsigned char>(lead[0]))) guess = guess.substr(0, 1);
      a.element = atomic_number(guess) ? guess : (atomic_number(guess.substr(0, 1)) ? guess.substr(0, 1) : "");
    }
    if (!a.element.empty() && a.element.size() == 2) a.element = std::string(1, a.element[0]) +
                                                                 static_cast<char>(std::tolower(static_cast<unsigned char>(a.element[1])));
    s.atoms.push_back(std::move(a));
  }
  if (in_model) fail(n, "the last MODEL has no ENDMDL");
  if (!explicit_models) {
    if (current.empty()) fail(n, "no ATOM or HETATM record");
    close_model(n);
  }
  if (s.models.empty()) fail(n, "no model with atoms");
  return s;
}

}  // namespace yeto::structure
