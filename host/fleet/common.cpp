#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "fleet/engines.hpp"

namespace yeto::fleet {

std::string shell_line(const std::vector<Word>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out.push_back(' ');
    out += w.raw ? w.text : shell_quote(w.text);
  }
  return out;
}

std::string island_role(std::size_t i) { return "island-" + std::to_string(i); }

std::vector<Manifest> render_each(const Fleet& f, const std::string& engine, const std::string& ext, SyncerText syncer,
                                  IslandText island) {
  std::vector<Manifest> out;
  const auto dir = f.run_dir / "launch" / engine;
  out.push_back({"syncer", dir / ("syncer" + ext), syncer(f)});
  for (std::size_t i = 0; i < f.islands.size(); ++i)
    out.push_back({island_role(i), dir / (island_role(i) + ext), island(f, i)});
  return out;
}

namespace {
void add_common(std::vector<Word>& w, const Fleet& f, const JobPaths& p) {
  if (!p.config.empty()) w.insert(w.end(), {{"--config"}, {p.config}});
  for (const auto& s : f.sets) w.insert(w.end(), {{"--set"}, {s}});
  if (p.run_dir != f.run_dir.string())
    for (const auto& s : mounted_sets(f)) w.insert(w.end(), {{"--set"}, {s}});
  w.insert(w.end(), {{"--set"}, {"sync.islands=" + std::to_string(f.islands.size())}});
}
}  // namespace

std::vector<Word> syncer_words(const Fleet& f, const JobPaths& p, int port) {
  std::vector<Word> w{{p.host_bin}, {"syncer"}};
  add_common(w, f, p);
  w.insert(w.end(), {{"--listen"}, {"0.0.0.0:" + std::to_string(port)}, {"--run-secret-file"}, p.secret,
                     {"--state-dir"}, {p.run_dir + "/syncer"}});
  return w;
}

std::vector<Word> learner_words(const Fleet& f, const JobPaths& p, std::size_t island, const Word& syncer) {
  const IslandSpec& spec = f.islands.at(island);
  std::vector<Word> w{{p.host_bin}, {"learner"}};
  add_common(w, f, p);
  w.insert(w.end(), {{"--set"}, {"train.island_ranks=" + std::to_string(spec.ranks())}});
  if (spec.ranks() > 1) w.insert(w.end(), {{"--set"}, {std::string("train.shard=") + (f.shard == "fsdp" ? "fsdp" : "ddp")}});
  w.insert(w.end(), {{"--syncer"}, syncer, {"--run-secret-file"}, p.secret, {"--learner-id"}, {island_role(island)},
                     {"--island-rank"}, {std::to_string(island)}, {"--output"}, {p.run_dir + "/" + island_role(island)}});
  return w;
}

std::vector<std::string> mounted_sets(const Fleet& f) {
  std::vector<std::string> out;
  // A manifest file is mounted with its directory (the media it names lie beside it).
  if (!f.data_local.empty())
    out.push_back("data.path=" + f.s.mount + "/data" +
                  (std::filesystem::is_regular_file(f.data_local) ? "/" + f.data_local.filename().string() : ""));
  if (!f.model_local.empty()) out.push_back("model.id=" + f.s.mount + "/model");
  return out;
}

std::string yaml_str(const std::string& s) {
  bool plain = !s.empty();
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) == 0 && std::string_view("-_./=+@").find(c) == std::string_view::npos) plain = false;
  }
  // Words YAML would read as another type stay quoted.
  static const char* kTyped[] = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"};
  std::string lower;
  for (char c : s) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  for (const char* t : kTyped)
    if (lower == t) plain = false;
  if (plain && (std::isdigit(static_cast<unsigned char>(s[0])) != 0 || s[0] == '-' || s[0] == '.' || s[0] == '+' || s[0] == '@'))
    plain = false;
  if (plain) return s;
  std::string q = "\"";
  for (char c : s) {
    switch (c) {
      case '"': q += "\\\""; break;
      case '\\': q += "\\\\"; break;
      case '\n': q += "\\n"; break;
      case '\t': q += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          q += buf;
        } else {
          q.push_back(c);
        }
    }
  }
  return q + "\"";
}

std::string yaml_block(const std::string& text, int indent) {
  std::string out = "|\n";
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    out += line.empty() ? "\n" : pad + line + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace yeto::fleet
