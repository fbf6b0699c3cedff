#include "config/config.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "core/strings.hpp"

namespace yeto::config {
namespace fs = std::filesystem;

std::string origin_name(Origin o) {
  switch (o) {
    case Origin::default_value: return "default";
    case Origin::file: return "file";
    case Origin::flag: return "flag";
  }
  return "?";
}

namespace {

// Collects every problem so the user sees all of them at once.
struct Problems {
  std::vector<std::string> lines;
  void add(const Location& where, const std::string& msg) { lines.push_back(with_location(where, msg)); }
  void add(const std::string& where, const std::string& msg) {
    lines.push_back(where.empty() ? msg : where + ": " + msg);
  }
};

std::string toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

Location location_of(const toml::source_region& src, const fs::path& file) {
  Location l;
  l.file = file.string();
  l.line = static_cast<int>(src.begin.line);
  l.column = static_cast<int>(src.begin.column);
  return l;
}

// Message for a key that is not in the schema: renamed, unknown section, or a typo.
std::string unknown_key_message(const std::string& key) {
  if (const RenamedKey* r = find_renamed(key)) {
    std::string m = "key '" + key + "' was renamed to '" + r->new_key + "'; write '" + r->new_key +
                    "' instead";
    if (!r->note.empty()) m += " (" + r->note + ")";
    return m;
  }
  const std::string section = key.substr(0, key.find('.'));
  if (key.find('.') == std::string::npos || !is_section(section)) {
    // Maybe the whole dotted key is close to a known key, else suggest a section.
    std::string m = "unknown key '" + key + "'";
    const std::string near = closest_match(key, all_keys());
    if (!near.empty()) return m + "; did you mean '" + near + "'?";
    std::vector<std::string> names;
    for (const auto& s : sections()) names.push_back(s.name);
    const std::string near_section = closest_match(section, names);
    if (!near_section.empty()) return m + "; did you mean section [" + near_section + "]?";
    return m + " (sections: " + join(names, ", ") + ")";
  }
  std::vector<std::string> in_section;
  for (const auto& d : schema())
    if (d.section() == section) in_section.push_back(d.key);
  std::string m = "unknown key '" + key + "' in section [" + section + "]";
  std::string near = closest_match(key, in_section);
  if (near.empty()) near = closest_match(key, all_keys());
  if (!near.empty()) return m + "; did you mean '" + near + "'?";
  std::vector<std::string> names;
  for (const auto& k : in_section) names.push_back(k.substr(k.find('.') + 1));
  return m + " (keys of [" + section + "]: " + join(names, ", ") + ")";
}

// Range and choice checks shared by file values and flags. Returns "" when valid.
std::string check_value(const KeyDef& d, const Value& v) {
  auto out_of_range = [&](double x) -> std::string {
    if ((d.min && x < *d.min) || (d.max && x > *d.max)) {
      std::ostringstream m;
      m << "key '" << d.key << "' must be";
      if (d.min && d.max)
        m << " between " << *d.min << " and " << *d.max;
      else if (d.min)
        m << " at least " << *d.min;
      else
        m << " at most " << *d.max;
      m << ", got " << x;
      return m.str();
    }
    return {};
  };
  if (d.type == Type::integer || (d.type == Type::integer_or_auto && std::holds_alternative<std::int64_t>(v)))
    return out_of_range(static_cast<double>(std::get<std::int64_t>(v)));
  if (d.type == Type::number) {
    const double x = std::get<double>(v);
    if (!std::isfinite(x)) return "key '" + d.key + "' must be a finite number";
    return out_of_range(x);
  }
  if (d.type == Type::choice) {
    const auto& s = std::get<std::string>(v);
    for (const auto& c : d.choices)
      if (c == s) return {};
    return "key '" + d.key + "' must be one of " + join(d.choices, ", ") + ", got '" + s + "'" +
           did_you_mean(s, d.choices);
  }
  return {};
}

// Converts a TOML node to the key's type. Returns an error text, "" on success.
std::string from_toml(const KeyDef& d, const toml::node& n, Value& out) {
  const std::string expected = "key '" + d.key + "' expects " + describe_type(d) + ", got " + toml_type_name(n);
  switch (d.type) {
    case Type::boolean:
      if (!n.is_boolean()) return expected;
      out = n.as_boolean()->get();
      return {};
    case Type::integer:
      if (!n.is_integer()) return expected;
      out = n.as_integer()->get();
      return {};
    case Type::number:
      if (n.is_integer()) out = static_cast<double>(n.as_integer()->get());
      else if (n.is_floating_point()) out = n.as_floating_point()->get();
      else return expected;
      return {};
    case Type::string:
    case Type::path:
    case Type::choice:
      if (!n.is_string()) return expected;
      out = n.as_string()->get();
      return {};
    case Type::string_list: {
      if (n.is_string()) {
        out = std::vector<std::string>{n.as_string()->get()};
        return {};
      }
      if (!n.is_array()) return expected;
      std::vector<std::string> items;
      std::size_t i = 0;
      for (const auto& el : *n.as_array()) {
        if (!el.is_string())
          return "key '" + d.key + "' expects an array of strings, but element " + std::to_string(i) +
                 " is " + toml_type_name(el);
        items.push_back(el.as_string()->get());
        ++i;
      }
      out = std::move(items);
      return {};
    }
    case Type::integer_or_auto:
      if (n.is_integer()) {
        out = n.as_integer()->get();
        return {};
      }
      if (n.is_string() && n.as_string()->get() == "auto") {
        out = std::string("auto");
        return {};
      }
      if (n.is_string())
        return "key '" + d.key + "' expects an integer or \"auto\", got \"" + n.as_string()->get() + "\"";
      return expected;
  }
  return expected;
}

bool parse_int(const std::string& s, std::int64_t& out) {
  const std::string t = trim(s);
  if (t.empty()) return false;
  const char* b = t.data();
  if (*b == '+') ++b;
  const auto r = std::from_chars(b, t.data() + t.size(), out);
  return r.ec == std::errc{} && r.ptr == t.data() + t.size();
}

bool parse_number(const std::string& s, double& out) {
  const std::string t = trim(s);
  if (t.empty()) return false;
  char* end = nullptr;
  out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

// Converts a command-line string to the key's type.
std::string from_text(const KeyDef& d, const std::string& text, Value& out) {
  const std::string expected = "key '" + d.key + "' expects " + describe_type(d) + ", got '" + text + "'";
  switch (d.type) {
    case Type::boolean: {
      const std::string t = trim(text);
      if (t == "true" || t == "1" || t == "yes" || t == "on") out = true;
      else if (t == "false" || t == "0" || t == "no" || t == "off") out = false;
      else return expected;
      return {};
    }
    case Type::integer: {
      std::int64_t i = 0;
      if (!parse_int(text, i)) return expected;
      out = i;
      return {};
    }
    case Type::number: {
      double x = 0;
      if (!parse_number(text, x)) return expected;
      out = x;
      return {};
    }
    case Type::string:
    case Type::path:
    case Type::choice:
      out = text;
      return {};
    case Type::string_list: {
      const std::string t = trim(text);
      if (!t.empty() && t.front() == '[') {
        // A TOML array literal: --set 'lora.targets=["to_q", "to_k"]'
        try {
          const toml::table tbl = toml::parse(std::string_view{"v = " + t}, std::string_view{"--set"});
          return from_toml(d, *tbl.get("v"), out);
        } catch (const toml::parse_error& e) {
          return "key '" + d.key + "': cannot parse array '" + t + "': " + std::string(e.description());
        }
      }
      std::vector<std::string> items;
      if (!t.empty())
        for (const auto& part : split(t, ',')) {
          const std::string p = trim(part);
          if (!p.empty()) items.push_back(p);
        }
      out = std::move(items);
      return {};
    }
    case Type::integer_or_auto: {
      if (trim(text) == "auto") {
        out = std::string("auto");
        return {};
      }
      std::int64_t i = 0;
      if (!parse_int(text, i)) return expected;
      out = i;
      return {};
    }
  }
  return expected;
}

// Walks a parsed table, assigning every leaf that the schema knows.
void apply_table(const toml::table& tbl, const std::string& prefix, const fs::path& file,
                 Config& cfg, std::map<std::string, Entry*>& by_key, Problems& problems) {
  for (const auto& [k, node] : tbl) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    const Location where = location_of(k.source().begin.line ? k.source() : node.source(), file);
    if (node.is_table()) {
      if (prefix.empty() && is_section(key)) {
        apply_table(*node.as_table(), key, file, cfg, by_key, problems);
      } else {
        problems.add(where, unknown_key_message(key) + (find_key(key) ? "" : " (a table is not allowed here)"));
      }
      continue;
    }
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      problems.add(where, unknown_key_message(key));
      continue;
    }
    Entry& e = *it->second;
    Value v;
    const Location value_where = location_of(node.source(), file);
    std::string err = from_toml(*e.def, node, v);
    if (err.empty()) err = check_value(*e.def, v);
    if (!err.empty()) {
      problems.add(value_where, err);
      continue;
    }
    e.value = std::move(v);
    e.origin = Origin::file;
    e.where = where.str();
    e.base_dir = fs::absolute(file).parent_path();
  }
}

}  // namespace

Config::Config() {
  const fs::path cwd = fs::current_path();
  for (const auto& d : schema()) {
    Entry e;
    e.def = &d;
    e.value = d.default_value;
    e.origin = Origin::default_value;
    e.base_dir = cwd;
    entries_.push_back(std::move(e));
  }
}

Config Config::resolve(const std::optional<fs::path>& file, const std::vector<Override>& overrides) {
  Config cfg;
  Problems problems;
  std::map<std::string, Entry*> by_key;
  for (auto& e : cfg.entries_) by_key[e.def->key] = &e;

  if (file) {
    std::error_code ec;
    if (!fs::exists(*file, ec))
      throw Error("config file not found: '" + file->string() + "' (pass an existing run.toml with --config)",
                  ExitCode::not_found);
    if (fs::is_directory(*file, ec))
      throw UsageError("config path '" + file->string() + "' is a directory, not a TOML file");
    cfg.file_ = *file;
    toml::table tbl;
    try {
      tbl = toml::parse_file(file->string());
    } catch (const toml::parse_error& e) {
      Location l;
      l.file = file->string();
      l.line = static_cast<int>(e.source().begin.line);
      l.column = static_cast<int>(e.source().begin.column);
      throw UsageError(with_location(l, "invalid TOML: " + std::string(e.description())));
    }
    apply_table(tbl, "", *file, cfg, by_key, problems);
  }

  const fs::path cwd = fs::current_path();
  for (const auto& o : overrides) {
    auto it = by_key.find(o.key);
    if (it == by_key.end()) {
      problems.add(o.source, unknown_key_message(o.key));
      continue;
    }
    Entry& e = *it->second;
    Value v;
    std::string err = from_text(*e.def, o.value, v);
    if (err.empty()) err = check_value(*e.def, v);
    if (!err.empty()) {
      problems.add(o.source, err);
      continue;
    }
    e.value = std::move(v);
    e.origin = Origin::flag;
    e.where = o.source;
    e.base_dir = cwd;
  }

  // Conditional defaults, once every source has been applied: a key left at its default takes
  // the first that matches the other key's resolved value.
  for (auto& e : cfg.entries_) {
    if (e.origin != Origin::default_value) continue;
    for (const auto& w : e.def->default_when) {
      const auto it = by_key.find(w.when);
      if (it == by_key.end()) throw Error("internal: " + e.def->key + "'s default depends on unknown key " + w.when);
      if (it->second->value == w.equals) {
        e.value = w.value;
        break;
      }
    }
  }

  if (!problems.lines.empty()) {
    std::string msg = problems.lines.size() == 1 ? "invalid run configuration: "
                                                 : "invalid run configuration (" +
                                                       std::to_string(problems.lines.size()) + " problems):\n  ";
    msg += join(problems.lines, "\n  ");
    msg += "\n(`yeto-host config --keys` lists every key with its type and default)";
    throw UsageError(msg);
  }
  return cfg;
}

const Entry& Config::entry(const std::string& key) const {
  for (const auto& e : entries_)
    if (e.def->key == key) return e;
  // A key the code asks for but the schema lacks is a programming error; say so plainly.
  throw Error("internal: configuration key '" + key + "' is not in the schema");
}

namespace {
template <typename T>
const T& get_as(const Entry& e, const char* what) {
  if (const T* p = std::get_if<T>(&e.value)) return *p;
  throw Error("internal: configuration key '" + e.def->key + "' is not " + what);
}
}  // namespace

bool Config::get_bool(const std::string& key) const { return get_as<bool>(entry(key), "a boolean"); }
std::int64_t Config::get_int(const std::string& key) const { return get_as<std::int64_t>(entry(key), "an integer"); }
double Config::get_number(const std::string& key) const { return get_as<double>(entry(key), "a number"); }
const std::string& Config::get_string(const std::string& key) const {
  return get_as<std::string>(entry(key), "a string");
}
const std::vector<std::string>& Config::get_list(const std::string& key) const {
  return get_as<std::vector<std::string>>(entry(key), "a list");
}
bool Config::is_auto(const std::string& key) const {
  const Entry& e = entry(key);
  const auto* s = std::get_if<std::string>(&e.value);
  return s && *s == "auto";
}

fs::path Config::get_path(const std::string& key) const {
  const Entry& e = entry(key);
  const std::string& s = get_as<std::string>(e, "a path");
  if (s.empty()) return {};
  fs::path p(s);
  if (s.front() == '~') {
    if (const char* home = std::getenv("HOME")) p = fs::path(home) / s.substr(s.size() > 1 && s[1] == '/' ? 2 : 1);
  }
  if (p.is_relative()) p = e.base_dir / p;
  return p.lexically_normal();
}

namespace {

// Keys whose relative values name files or directories besides the path-typed ones: a value
// is rewritten only when it exists relative to its base directory (an alias or hub id that
// does not name a local directory stays as written).
bool locates(const KeyDef& d) {
  static const std::set<std::string> keys = {"model.id", "data.path", "plugins.dirs", "plugins.trusted_keys",
                                             "plugins.revoked_keys"};
  return d.type == Type::path || keys.count(d.key) != 0;
}

std::string absolute_location(const Entry& e, const std::string& v) {
  if (v.empty() || v.front() == '~') return v;
  const fs::path p(v);
  if (p.is_absolute()) return v;
  const fs::path full = (e.base_dir / p).lexically_normal();
  std::error_code ec;
  if (e.def->type == Type::path || fs::exists(full, ec)) return full.string();
  return v;
}

// The value as the printed record holds it: a location set in a file or by a flag is written
// absolute, so the record reads the same from any directory (a run directory's config.toml).
Value recorded_value(const Entry& e) {
  if (e.origin == Origin::default_value || e.base_dir.empty() || !locates(*e.def)) return e.value;
  if (const auto* s = std::get_if<std::string>(&e.value)) return absolute_location(e, *s);
  if (const auto* l = std::get_if<std::vector<std::string>>(&e.value)) {
    std::vector<std::string> out;
    for (const auto& v : *l) out.push_back(absolute_location(e, v));
    return out;
  }
  return e.value;
}

}  // namespace

std::string Config::to_toml(bool with_origins) const {
  std::ostringstream out;
  bool first = true;
  for (const auto& sec : sections()) {
    std::vector<std::pair<std::string, const Entry*>> lines;
    std::size_t width = 0;
    for (const auto& e : entries_) {
      if (e.def->section() != sec.name) continue;
      const std::string line = e.def->name() + " = " + to_toml_literal(with_origins ? recorded_value(e) : e.value);
      width = std::max(width, line.size());
      lines.emplace_back(line, &e);
    }
    if (lines.empty()) continue;
    if (!first) out << "\n";
    first = false;
    out << "[" << sec.name << "]\n";
    for (const auto& [line, e] : lines) {
      out << line;
      if (with_origins) {
        out << std::string(width - line.size() + 2, ' ') << "# " << origin_name(e->origin);
        if (!e->where.empty()) out << " " << e->where;
      }
      out << "\n";
    }
  }
  return out.str();
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& e : entries_) {
    nlohmann::json v;
    std::visit([&](const auto& x) { v = x; }, e.value);
    j[e.def->key] = {{"value", v}, {"origin", origin_name(e.origin)}, {"where", e.where}};
  }
  return j;
}

std::string Config::hash() const { return sha256_hex(to_toml(false)); }

}  // namespace yeto::config
