// mmCIF: the atom_site loop written and read (CIF 1.1 syntax: data blocks, items, loops,
// quoted values, ';' text fields, comments).
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>

#include "core/error.hpp"
#include "structure/structure.hpp"

namespace yeto::structure {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool reserved_word(const std::string& s) {
  const std::string l = lower(s);
  return l.rfind("data_", 0) == 0 || l.rfind("save_", 0) == 0 || l == "loop_" || l == "global_" || l == "stop_";
}

// One value as CIF writes it: bare when it can be, else quoted ("C4'" in double quotes, a
// value with a double quote in single ones), else a ';' text field.
std::string cif_value(const std::string& v) {
  bool quote = v.empty() || v == "?" || v == "." || reserved_word(v) || std::string("_#$'\";[]").find(v[0]) != std::string::npos;
  bool newline = false, single = false, dbl = false;
  for (char c : v) {
    if (c == '\n' || c == '\r') newline = true;
    if (std::isspace(static_cast<unsigned char>(c))) quote = true;
    if (c == '\'') single = quote = true;
    if (c == '"') dbl = quote = true;
  }
  if (!quote) return v;
  if (newline || (single && dbl)) return "\n;" + v + "\n;\n";
  return single ? "\"" + v + "\"" : "'" + v + "'";
}

std::string number(double v, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  std::string s = buf;
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);  // "-0.000": what rounds to 0
  return s;
}

std::string block_name(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ? c : '_';
  return out.empty() ? "structure" : out;
}

// ---- reading ----------------------------------------------------------------------------

struct Token {
  std::string text;
  int line = 0;
  bool quoted = false;  // quoted or a text field: never a tag, a keyword, '?' or '.'
};

struct Table {
  std::vector<std::string> tags;  // item names, lower case ("cartn_x")
  std::vector<std::vector<Token>> rows;
  int line = 0;
  bool loop = false;
};

class Reader {
 public:
  Reader(const std::string& text, const std::string& where) : t_(text), where_(where) {}

  [[noreturn]] void fail(int line, const std::string& what) const {
    throw Error(where_ + ":" + std::to_string(line) + ": " + what, ExitCode::bad_input);
  }

  std::vector<Token> tokens() {
    std::vector<Token> out;
    while (true) {
      // Skip blanks and comments.
      while (i_ < t_.size()) {
        const char c = t_[i_];
        if (c == '\n') {
          ++line_;
          ++i_;
          bol_ = true;
        } else if (c == ' ' || c == '\t' || c == '\r') {
          ++i_;
          bol_ = false;
        } else if (c == '#') {
          while (i_ < t_.size() && t_[i_] != '\n') ++i_;
        } else {
          break;
        }
      }
      if (i_ >= t_.size()) return out;
      const char c = t_[i_];
      Token tok;
      tok.line = line_;
      if (c == ';' && bol_) {
        // A text field: to the next line that starts with ';'.
        std::size_t start = i_ + 1;
        std::size_t pos = start;
        int lines = 0;
        while (true) {
          const std::size_t nl = t_.find('\n', pos);
          if (nl == std::string::npos) fail(tok.line, "a ';' text field is not closed (no line starting with ';')");
          ++lines;
          if (nl + 1 < t_.size() && t_[nl + 1] == ';') {
            tok.text = t_.substr(start, nl - start);
            if (!tok.text.empty() && tok.text.back() == '\r') tok.text.pop_back();
            i_ = nl + 2;
            break;
          }
          pos = nl + 1;
        }
        line_ += lines;
        tok.quoted = true;
      } else if (c == '\'' || c == '"') {
        // Closed by the same quote followed by a blank or the end of the line.
        std::size_t j = i_ + 1;
        while (true) {
          if (j >= t_.size() || t_[j] == '\n')
            fail(tok.line, std::string("a ") + (c == '\'' ? "single" : "double") + "-quoted value is not closed on its line");
          if (t_[j] == c && (j + 1 >= t_.size() || std::isspace(static_cast<unsigned char>(t_[j + 1])))) break;
          ++j;
        }
        tok.text = t_.substr(i_ + 1, j - i_ - 1);
        tok.quoted = true;
        i_ = j + 1;
      } else {
        std::size_t j = i_;
        while (j < t_.size() && !std::isspace(static_cast<unsigned char>(t_[j]))) ++j;
        tok.text = t_.substr(i_, j - i_);
        i_ = j;
      }
      bol_ = false;
      out.push_back(std::move(tok));
    }
  }

  // The first data block's categories, by lower-case name ("atom_site").
  std::map<std::string, Table> first_block() {
    const std::vector<Token> toks = tokens();
    std::map<std::string, Table> cats;
    std::size_t k = 0;
    bool in_block = false;
    auto is_tag = [](const Token& t) { return !t.quoted && !t.text.empty() && t.text[0] == '_'; };
    auto category = [&](const Token& t) {
      const auto dot = t.text.find('.');
      if (dot == std::string::npos || dot < 2 || dot + 1 >= t.text.size())
        fail(t.line, "tag '" + t.text + "' is not of the form _category.item");
      return std::pair{lower(t.text.substr(1, dot - 1)), lower(t.text.substr(dot + 1))};
    };
    while (k < toks.size()) {
      const Token& t = toks[k];
      const std::string l = t.quoted ? "" : lower(t.text);
      if (!t.quoted && l.rfind("data_", 0) == 0) {
        if (in_block) break;  // only the first block
        in_block = true;
        ++k;
        continue;
      }
      if (!in_block) fail(t.line, "'" + t.text.substr(0, 40) + "' before the first data_ block");
      if (!t.quoted && (l.rfind("save_", 0) == 0 || l == "global_" || l == "stop_")) {
        ++k;
        continue;
      }
      if (!t.quoted && l == "loop_") {
        const int loop_line = t.line;
        ++k;
        std::vector<std::string> tags;
        std::string cat;
        while (k < toks.size() && is_tag(toks[k])) {
          const auto [c, item] = category(toks[k]);
          if (!cat.empty() && c != cat)
            fail(toks[k].line, "loop_ at line " + std::to_string(loop_line) + " mixes categories '" + cat + "' and '" + c + "'");
          cat = c;
          tags.push_back(item);
          ++k;
        }
        if (tags.empty()) fail(loop_line, "loop_ without tags");
        std::vector<Token> values;
        while (k < toks.size() && !is_tag(toks[k])) {
          const std::string v = toks[k].quoted ? "" : lower(toks[k].text);
          if (!toks[k].quoted && (v == "loop_" || v.rfind("data_", 0) == 0 || v.rfind("save_", 0) == 0 ||
                                  v == "global_" || v == "stop_"))
            break;
          values.push_back(toks[k++]);
        }
        if (values.size() % tags.size() != 0)
          fail(loop_line, "the loop of _" + cat + " has " + std::to_string(values.size()) +
                              " values, not a multiple of its " + std::to_string(tags.size()) + " columns (row " +
                              std::to_string(values.size() / tags.size() + 1) + " is short; it starts at line " +
                              std::to_string(values[values.size() - values.size() % tags.size()].line) + ")");
        if (cats.count(cat)) fail(loop_line, "category _" + cat + " is given twice");
        Table tab;
        tab.tags = tags;
        tab.line = loop_line;
        tab.loop = true;
        for (std::size_t r = 0; r < values.size(); r += tags.size())
          tab.rows.emplace_back(values.begin() + static_cast<std::ptrdiff_t>(r),
                                values.begin() + static_cast<std::ptrdiff_t>(r + tags.size()));
        cats[cat] = std::move(tab);
        continue;
      }
      if (is_tag(t)) {
        const auto [c, item] = category(t);
        if (k + 1 >= toks.size() || is_tag(toks[k + 1]) ||
            (!toks[k + 1].quoted && (reserved_word(toks[k + 1].text))))
          fail(t.line, "tag '" + t.text + "' has no value");
        Table& tab = cats[c];
        if (tab.loop) fail(t.line, "category _" + c + " is given as a loop and as items");
        if (tab.rows.empty()) {
          tab.rows.emplace_back();
          tab.line = t.line;
        }
        for (const auto& have : tab.tags)
          if (have == item) fail(t.line, "tag '" + t.text + "' is given twice");
        tab.tags.push_back(item);
        tab.rows[0].push_back(toks[k + 1]);
        k += 2;
        continue;
      }
      fail(t.line, "value '" + t.text.substr(0, 40) + "' has no tag");
    }
    if (!in_block) fail(1, "no data_ block (is this an mmCIF file?)");
    return cats;
  }

 private:
  const std::string& t_;
  const std::string& where_;
  std::size_t i_ = 0;
  int line_ = 1;
  bool bol_ = true;
};

bool missing(const Token& t) { return !t.quoted && (t.text == "?" || t.text == "."); }

}  // namespace

std::string mmcif_text(const Structure& s) {
  validate(s);
  const std::string name = block_name(s.name);
  std::string out = "data_" + name + "\n#\n_entry.id " + cif_value(name) + "\n#\nloop_\n";
  for (const char* tag : {"group_PDB", "id", "type_symbol", "label_atom_id", "label_alt_id", "label_comp_id",
                          "label_asym_id", "label_entity_id", "label_seq_id", "pdbx_PDB_ins_code", "Cartn_x", "Cartn_y",
                          "Cartn_z", "occupancy", "B_iso_or_equiv", "auth_seq_id", "auth_comp_id", "auth_asym_id",
                          "auth_atom_id", "pdbx_PDB_model_num"})
    out += std::string("_atom_site.") + tag + "\n";
  std::map<std::string, int> entity;  // chain -> entity id, in order of appearance
  for (const auto& a : s.atoms) entity.emplace(a.chain, static_cast<int>(entity.size()) + 1);
  std::size_t serial = 0;
  for (std::size_t m = 0; m < s.models.size(); ++m) {
    for (std::size_t i = 0; i < s.atoms.size(); ++i) {
      const Atom& a = s.atoms[i];
      const auto& x = s.models[m][i];
      const std::string atom = cif_value(a.name), comp = cif_value(a.residue), chain = cif_value(a.chain);
      const std::string seq = std::to_string(a.residue_index);
      out += (a.hetero ? "HETATM " : "ATOM   ") + std::to_string(++serial) + " " +
             (a.element.empty() ? std::string("?") : cif_value(a.element)) + " " + atom + " . " + comp + " " + chain +
             " " + std::to_string(entity.at(a.chain)) + " " + seq + " ? " + number(x[0], "%.3f") + " " +
             number(x[1], "%.3f") + " " + number(x[2], "%.3f") + " " + number(a.occupancy, "%.2f") + " " +
             number(a.b_factor, "%.2f") + " " + seq + " " + comp + " " + chain + " " + atom + " " +
             std::to_string(m + 1) + "\n";
    }
  }
  return out + "#\n";
}

Structure parse_mmcif(const std::string& text, const std::string& where) {
  Reader reader(text, where);
  const auto cats = reader.first_block();
  const auto it = cats.find("atom_site");
  if (it == cats.end()) throw Error(where + ": no _atom_site category (no atoms)", ExitCode::bad_input);
  const Table& tab = it->second;
  auto col = [&](const char* item) -> std::optional<std::size_t> {
    for (std::size_t c = 0; c < tab.tags.size(); ++c)
      if (tab.tags[c] == item) return c;
    return std::nullopt;
  };
  auto need = [&](std::optional<std::size_t> a, std::optional<std::size_t> b, const std::string& what) {
    if (!a && !b)
      reader.fail(tab.line, "_atom_site has no " + what + " column");
    return std::pair{a, b};
  };
  const auto cx = col("cartn_x"), cy = col("cartn_y"), cz = col("cartn_z");
  if (!cx || !cy || !cz) reader.fail(tab.line, "_atom_site needs Cartn_x, Cartn_y and Cartn_z");
  const auto atom_c = need(col("label_atom_id"), col("auth_atom_id"), "label_atom_id or auth_atom_id");
  const auto comp_c = need(col("label_comp_id"), col("auth_comp_id"), "label_comp_id or auth_comp_id");
  const auto chain_c = need(col("label_asym_id"), col("auth_asym_id"), "label_asym_id or auth_asym_id");
  const auto seq_c = need(col("label_seq_id"), col("auth_seq_id"), "label_seq_id or auth_seq_id");
  const auto type_c = col("type_symbol"), group_c = col("group_pdb"), occ_c = col("occupancy"),
             b_c = col("b_iso_or_equiv"), model_c = col("pdbx_pdb_model_num");

  // The value of the first of two columns that is present and not '?' / '.'.
  auto pick = [&](const std::vector<Token>& row, std::pair<std::optional<std::size_t>, std::optional<std::size_t>> c,
                  const std::string& what) -> const Token& {
    for (const auto& o : {c.first, c.second})
      if (o && !missing(row[*o])) return row[*o];
    reader.fail(row.front().line, "atom_site row: no " + what + " ('?' or '.')");
  };
  auto real = [&](const Token& t, const std::string& what) {
    std::string s = t.text;
    if (const auto p = s.find('('); p != std::string::npos && !s.empty() && s.back() == ')') s = s.substr(0, p);  // 1.23(4)
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
      reader.fail(t.line, "atom_site " + what + " '" + t.text.substr(0, 40) + "' is not a finite number");
    return v;
  };
  auto integer = [&](const Token& t, const std::string& what) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(t.text.c_str(), &end, 10);
    if (t.text.empty() || end != t.text.c_str() + t.text.size() || errno == ERANGE)
      reader.fail(t.line, "atom_site " + what + " '" + t.text.substr(0, 40) + "' is not an integer");
    return static_cast<std::int64_t>(v);
  };

  Structure s;
  s.name = "structure";
  if (const auto e = cats.find("entry"); e != cats.end() && !e->second.rows.empty())
    for (std::size_t c = 0; c < e->second.tags.size(); ++c)
      if (e->second.tags[c] == "id" && !missing(e->second.rows[0][c])) s.name = e->second.rows[0][c].text;
  std::vector<std::int64_t> model_numbers;
  std::map<std::int64_t, std::size_t> model_slot;
  for (const auto& row : tab.rows) {
    const std::int64_t model = model_c && !missing(row[*model_c]) ? integer(row[*model_c], "pdbx_PDB_model_num") : 1;
    auto [slot, fresh] = model_slot.emplace(model, s.models.size());
    if (fresh) {
      s.models.emplace_back();
      model_numbers.push_back(model);
    }
    const std::array<float, 3> xyz{static_cast<float>(real(row[*cx], "Cartn_x")), static_cast<float>(real(row[*cy], "Cartn_y")),
                                   static_cast<float>(real(row[*cz], "Cartn_z"))};
    s.models[slot->second].push_back(xyz);
    if (slot->second != 0) continue;
    Atom a;
    a.name = pick(row, atom_c, "atom name (label_atom_id / auth_atom_id)").text;
    a.residue = pick(row, comp_c, "residue name (label_comp_id / auth_comp_id)").text;
    a.chain = pick(row, chain_c, "chain (label_asym_id / auth_asym_id)").text;
    a.residue_index = integer(pick(row, seq_c, "residue number (label_seq_id / auth_seq_id)"), "residue number");
    if (type_c && !missing(row[*type_c])) a.element = row[*type_c].text;
    if (group_c) a.hetero = row[*group_c].text == "HETATM";
    if (occ_c && !missing(row[*occ_c])) a.occupancy = static_cast<float>(real(row[*occ_c], "occupancy"));
    if (b_c && !missing(row[*b_c])) a.b_factor = static_cast<float>(real(row[*b_c], "B_iso_or_equiv"));
    s.atoms.push_back(std::move(a));
  }
  if (s.atoms.empty()) reader.fail(tab.line, "_atom_site lists no atom");
  for (std::size_t m = 1; m < s.models.size(); ++m)
    if (s.models[m].size() != s.atoms.size())
      reader.fail(tab.line, "model " + std::to_string(model_numbers[m]) + " lists " +
                                std::to_string(s.models[m].size()) + " atoms, model " +
                                std::to_string(model_numbers[0]) + " lists " + std::to_string(s.atoms.size()));
  return s;
}

}  // namespace yeto::structure
