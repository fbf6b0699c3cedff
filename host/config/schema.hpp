// The run configuration schema: every key a run.toml may hold, with its type, default,
// accepted range or choices, the long command-line flag that sets it (if any) and its
// documentation. The schema is data; the loader, the CLI, `--help`, `config --keys` and
// docs/CONFIG.md are all derived from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace yeto::config {

enum class Type {
  boolean,
  integer,
  number,           // floating point; integers are accepted
  string,
  path,             // a string resolved against the directory of the file (or cwd for flags)
  choice,           // one of a fixed set of strings
  string_list,      // array of strings (a single string is a one-element list)
  integer_or_auto,  // an integer or the string "auto"
};

// Value of a key. integer_or_auto holds std::int64_t or the string "auto".
using Value = std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;

// A default that depends on another key: while the key is left at its default and `when`
// holds `equals` (from any source), the key's default is `value` instead.
struct DefaultWhen {
  std::string when;  // another key, itself without conditional defaults
  Value equals;
  Value value;
};

struct KeyDef {
  std::string key;   // "section.name"
  Type type = Type::string;
  Value default_value;
  std::string doc;
  std::string flag;  // long flag without the leading dashes; empty: only `--set key=value`
  std::vector<std::string> choices;
  std::optional<double> min;
  std::optional<double> max;
  std::vector<DefaultWhen> default_when;  // first match wins

  std::string section() const { return key.substr(0, key.find('.')); }
  std::string name() const { return key.substr(key.find('.') + 1); }
};

// A key that used to exist under another name. Using the old name is an error that says
// what to write instead.
struct RenamedKey {
  std::string old_key;
  std::string new_key;
  std::string note;  // extra advice, e.g. a change of unit; may be empty
};

struct SectionDef {
  std::string name;
  std::string doc;
};

const std::vector<SectionDef>& sections();
const std::vector<KeyDef>& schema();
const std::vector<RenamedKey>& renamed_keys();

const KeyDef* find_key(std::string_view key);
const KeyDef* find_flag(std::string_view flag);
const RenamedKey* find_renamed(std::string_view old_key);
bool is_section(std::string_view name);
std::vector<std::string> all_keys();
std::vector<std::string> all_flags();  // with leading "--"

// "an integer", "a string", "one of: a, b", ...
std::string describe_type(const KeyDef& def);
// The value as a TOML literal: true, 4, 0.0001, "text", ["a", "b"].
std::string to_toml_literal(const Value& value);

// The default as documented: the literal, then each conditional default,
// e.g. `1.5 (0.6 where sync.carry = false)`; with `markdown` each literal and key in backticks.
std::string default_text(const KeyDef& def, bool markdown = false);

// Markdown reference of every section and key (docs/CONFIG.md is this text).
std::string reference_markdown();

}  // namespace yeto::config
