#include "report/report.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <utility>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "report/plot.hpp"
#include "sample/png.hpp"
#include "sync/launch.hpp"
#include "sync/tape.hpp"

namespace yeto::report {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::vector<json> read_json_lines(const fs::path& p) {
  std::vector<json> out;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return out;
  std::istringstream in(read_file(p));
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      json j = json::parse(line);
      if (j.is_object()) out.push_back(std::move(j));
    } catch (const json::exception&) {
      // a line torn by a crash
    }
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

// A relative path as a URL path: unreserved characters kept, the rest percent-encoded.
std::string url_path(const fs::path& p) {
  static const char* hex = "0123456789ABCDEF";
  std::string o;
  for (unsigned char c : p.generic_string()) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') {
      o += static_cast<char>(c);
    } else {
      o += '%';
      o += hex[c >> 4];
      o += hex[c & 15];
    }
  }
  return o;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  if (v == std::floor(v) && std::abs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

struct Island {
  std::string label;  // "run" or "island-<i>"
  fs::path dir;
  std::map<std::int64_t, json> metrics;
};

struct Points {
  std::vector<double> x, y;
};

Points field(const std::map<std::int64_t, json>& m, const std::string& name) {
  Points p;
  for (const auto& [step, r] : m) {
    const auto it = r.find(name);
    if (it == r.end() || !it->is_number()) continue;
    p.x.push_back(static_cast<double>(step));
    p.y.push_back(it->get<double>());
  }
  return p;
}

// The last value of `name` in step order (NaN when never recorded).
double last_of(const std::map<std::int64_t, json>& m, const std::string& name) {
  for (auto it = m.rbegin(); it != m.rend(); ++it) {
    const auto f = it->second.find(name);
    if (f != it->second.end() && f->is_number()) return f->get<double>();
  }
  return std::nan("");
}

// A few keys of config.toml worth a line in the header (section.key = value, as written).
std::vector<std::pair<std::string, std::string>> config_summary(const std::string& toml) {
  static const std::set<std::string> keys = {
      "run.name",         "model.id",         "model.kind",           "tuning.mode",
      "lora.r",           "lora.alpha",       "data.path",            "train.max_steps",
      "train.micro_batch_size", "train.gradient_accumulation", "train.shard", "train.island_ranks",
      "optimizer.learning_rate", "optimizer.schedule", "validation.every", "diffusion.seed",
      "sync.islands",     "sync.fragments",   "sync.h",               "sync.quorum"};
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(toml);
  std::string line, section;
  while (std::getline(in, line)) {
    const auto b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    line = line.substr(b);
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    key.erase(key.find_last_not_of(" \t") + 1);
    const auto vb = value.find_first_not_of(" \t");
    value = vb == std::string::npos ? "" : value.substr(vb);
    // Drop a trailing comment outside quotes.
    bool quoted = false;
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (value[i] == '"') quoted = !quoted;
      if (value[i] == '#' && !quoted) {
        value = value.substr(0, i);
        break;
      }
    }
    value.erase(value.find_last_not_of(" \t\r") + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    const std::string full = section.empty() ? key : section + "." + key;
    if (keys.count(full)) out.emplace_back(full, value);
  }
  return out;
}

class Page {
 public:
  void row(const std::string& label, const std::string& key, const std::string& value) {
    body_ << "<tr><th scope=\"row\">" << html_escape(label) << "</th><td data-key=\"" << html_escape(key) << "\">"
          << html_escape(value) << "</td></tr>\n";
  }
  std::ostringstream& out() { return body_; }

 private:
  std::ostringstream body_;
};

constexpr const char* kStyle =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1e1e1e;background:#fafafa}"
    "h1{font-size:1.6em;margin:0 0 4px}h2{font-size:1.2em;margin:28px 0 8px;border-bottom:1px solid #ddd}"
    "table{border-collapse:collapse;margin:8px 0;background:#fff}"
    "th,td{border:1px solid #ccc;padding:4px 10px;text-align:left;vertical-align:top;font-size:0.92em}"
    "th{background:#f0f0f0}td[data-key]{font-family:ui-monospace,monospace}"
    "figure{margin:12px 0;background:#fff;border:1px solid #ddd;display:inline-block;padding:6px}"
    "figure img{max-width:100%;height:auto;display:block}figcaption{font-size:0.9em;color:#555;margin-top:4px}"
    ".grid{overflow-x:auto}.grid img{max-width:192px;height:auto;display:block}"
    "pre{background:#fff;border:1px solid #ddd;padding:8px;overflow-x:auto;font-size:0.85em}"
    ".note{color:#555}";

}  // namespace

std::map<std::int64_t, json> read_metrics(const fs::path& metrics_jsonl) {
  std::map<std::int64_t, json> by_step;
  bool first = true;
  std::int64_t prev = 0;
  for (const auto& r : read_json_lines(metrics_jsonl)) {
    const auto it = r.find("step");
    if (it == r.end() || !it->is_number_integer()) continue;
    const std::int64_t step = it->get<std::int64_t>();
    if (!first && step < prev) by_step.erase(by_step.lower_bound(step), by_step.end());
    json& slot = by_step[step];
    if (!slot.is_object()) slot = json::object();
    for (const auto& [k, v] : r.items()) slot[k] = v;
    prev = step;
    first = false;
  }
  return by_step;
}

ReportFiles write_report(const fs::path& run_dir_in) {
  std::error_code ec;
  if (!fs::is_directory(run_dir_in, ec))
    throw Error("report: " + run_dir_in.string() + " is not a run directory", ExitCode::not_found);
  const fs::path run_dir = fs::absolute(run_dir_in).lexically_normal();
  const fs::path out_dir = run_dir / "report";

  // An embedded run (a syncer and islands) or a single island.
  const bool embedded = fs::is_directory(run_dir / "island-0", ec) || fs::is_directory(run_dir / "syncer", ec);
  json summary_file;
  if (fs::is_regular_file(run_dir / "summary.json", ec)) {
    try {
      summary_file = json::parse(read_file(run_dir / "summary.json"));
    } catch (const json::exception&) {
    }
  }
  std::vector<Island> islands;
  if (embedded) {
    std::uint32_t n = 0;
    if (summary_file.is_object() && summary_file.contains("islands") && summary_file["islands"].is_number_unsigned())
      n = summary_file["islands"].get<std::uint32_t>();
    while (fs::is_directory(run_dir / ("island-" + std::to_string(n)), ec)) ++n;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::string id = "island-" + std::to_string(i);
      islands.push_back({id, run_dir / id, read_metrics(run_dir / id / "metrics.jsonl")});
    }
  } else {
    islands.push_back({"run", run_dir, read_metrics(run_dir / "metrics.jsonl")});
  }
  std::vector<json> tape;
  if (embedded) tape = sync::read_tape_history(run_dir / "syncer" / "tape.jsonl");
  bool any_metrics = false;
  for (const auto& i : islands) any_metrics = any_metrics || !i.metrics.empty();
  if (!any_metrics && tape.empty())
    throw Error("report: " + run_dir.string() + " holds no metrics.jsonl, tape or sync events to report on",
                ExitCode::not_found);
  fs::create_directories(out_dir);

  ReportFiles files;
  files.index = out_dir / "index.html";
  struct Figure {
    std::string file, alt, caption;
  };
  std::vector<Figure> figures;
  auto save = [&](const Image& img, const std::string& name, const std::string& alt, const std::string& caption) {
    sample::write_png(out_dir / name, img.rgb, img.height, img.width);
    files.images.push_back(out_dir / name);
    figures.push_back({name, alt, caption});
  };
  const bool many = islands.size() > 1;
  const std::size_t n_isl = islands.size();

  // Loss and val_loss per step.
  {
    LinePlot p;
    p.title = "Loss per step";
    p.x_label = "step";
    p.y_label = "loss";
    for (std::size_t i = 0; i < n_isl; ++i) {
      const auto& isl = islands[i];
      const std::string pre = many ? isl.label + " " : "";
      const Points l = field(isl.metrics, "loss"), v = field(isl.metrics, "val_loss");
      p.series.push_back({pre + "loss", palette(2 * i), SeriesStyle::line, l.x, l.y});
      p.series.push_back({pre + "val_loss", palette(2 * i + 1), SeriesStyle::line_points, v.x, v.y});
    }
    save(render(p), "loss.png", "Line chart of the training loss and the validation loss against the step" +
                                    std::string(many ? ", one line of each per island" : ""),
         "Training loss (every step) and validation loss (evaluation steps, with markers).");
  }
  // Learning rate and throughput.
  const std::pair<const char*, const char*> scalars[] = {{"lr", "Learning rate per step"},
                                                         {"samples_per_s", "Throughput per step (samples/s)"}};
  for (const auto& [name, title] : scalars) {
    LinePlot p;
    p.title = title;
    p.x_label = "step";
    p.y_label = name == std::string("lr") ? "learning rate" : "samples/s";
    p.y_from_zero = true;
    for (std::size_t i = 0; i < n_isl; ++i) {
      const Points pts = field(islands[i].metrics, name);
      p.series.push_back({many ? islands[i].label : std::string(name), palette(i), SeriesStyle::line, pts.x, pts.y});
    }
    const std::string file = name == std::string("lr") ? "lr.png" : "throughput.png";
    save(render(p), file,
         std::string("Line chart of the ") + (file == "lr.png" ? "learning rate" : "training throughput in samples per second") +
             " against the step" + (many ? ", one line per island" : ""),
         file == "lr.png" ? "Learning rate of the optimizer step." : "Samples per second of each training step.");
  }

  // Embedded runs: merges over time with their participation, and traffic per island.
  json esum;
  std::uint64_t merges = 0;
  if (embedded) {
    try {
      esum = sync::embedded_summary(run_dir, static_cast<std::uint32_t>(n_isl));
    } catch (const std::exception&) {
      esum = json();
    }
    double t0 = std::nan("");
    std::map<std::int64_t, Points> by_fragment;
    for (const auto& r : tape) {
      const auto t = r.find("time");
      if (t == r.end() || !t->is_number()) continue;
      if (std::isnan(t0)) t0 = t->get<double>();
      if (r.value("event", "") != "merge") continue;
      ++merges;
      const std::int64_t frag = r.value("fragment", std::int64_t{-1});
      by_fragment[frag].x.push_back(t->get<double>() - t0);
      by_fragment[frag].y.push_back(r.contains("learners") && r["learners"].is_array()
                                        ? static_cast<double>(r["learners"].size())
                                        : 0.0);
    }
    LinePlot p;
    p.title = "Merges over time: islands in each merge";
    p.x_label = "seconds since the syncer's first record";
    p.y_label = "islands merged";
    p.y_from_zero = true;
    p.y_integer = true;
    std::size_t k = 0;
    for (const auto& [frag, pts] : by_fragment)
      p.series.push_back({"fragment " + std::to_string(frag), palette(k++), SeriesStyle::points, pts.x, pts.y});
    save(render(p), "merges.png",
         "Scatter chart of the syncer's merges over time, one point per merge at the number of islands it merged, "
         "one colour per fragment",
         "Each point is one merge of one fragment; its height is how many islands took part.");

    BarPlot b;
    b.title = "Traffic per island vs a float32 ring all-reduce";
    double top = 0;
    std::vector<double> sent, recv, both, ar;
    if (esum.is_object())
      for (const auto& i : esum.value("per_island", json::array())) {
        b.categories.push_back(i.value("id", ""));
        sent.push_back(i.value("bytes_sent", 0.0));
        recv.push_back(i.value("bytes_received", 0.0));
        both.push_back(i.value("bytes_total", 0.0));
        ar.push_back(i.value("allreduce_equivalent_bytes", 0.0));
        top = std::max({top, both.back(), ar.back()});
      }
    const char* units[] = {"bytes", "KiB", "MiB", "GiB"};
    int u = 0;
    double scale = 1;
    while (top / scale >= 1024 * 10 && u < 3) scale *= 1024, ++u;
    for (auto* v : {&sent, &recv, &both, &ar})
      for (double& x : *v) x /= scale;
    b.y_label = units[u];
    b.groups = {{"sent", palette(0), sent},
                {"received", palette(2), recv},
                {"sent + received", palette(4), both},
                {"all-reduce, sent + received", palette(1), ar}};
    save(render(b), "traffic.png",
         "Bar chart of the bytes each island sent and received, their sum, and what a float32 ring all-reduce "
         "would have sent and received over the same steps",
         "Bytes per island in both directions against the float32 ring all-reduce baseline, which sends and "
         "receives 2(L-1)/L x 4 x numel bytes per rank and step.");
  }

  // The page.
  Page page;
  auto& o = page.out();
  const std::string run_name = run_dir.filename().string();
  o << "<h1>Run report: " << html_escape(run_name) << "</h1>\n<p class=\"note\">"
    << (embedded ? "Embedded run: a syncer and " + std::to_string(n_isl) + " learner island(s)." : std::string("Single-island run."))
    << "</p>\n";
  std::string config_text;
  if (fs::is_regular_file(run_dir / "config.toml", ec)) config_text = read_file(run_dir / "config.toml");
  const auto cfg = config_summary(config_text);
  if (!cfg.empty()) {
    o << "<h2>Configuration</h2>\n<table id=\"config\">\n<tbody>\n";
    for (const auto& [k, v] : cfg) page.row(k, "config." + k, v);
    o << "</tbody>\n</table>\n";
  }

  o << "<h2>Key numbers</h2>\n<table id=\"key-numbers\">\n<tbody>\n";
  std::int64_t final_step = 0;
  for (const auto& isl : islands)
    if (!isl.metrics.empty()) final_step = std::max(final_step, isl.metrics.rbegin()->first);
  if (!embedded) {
    const auto& m = islands[0].metrics;
    page.row("final step", "final_step", std::to_string(final_step));
    page.row("final loss", "final_loss", num(last_of(m, "loss")));
    page.row("final val_loss", "final_val_loss", num(last_of(m, "val_loss")));
    page.row("first val_loss", "first_val_loss",
             num(field(m, "val_loss").y.empty() ? std::nan("") : field(m, "val_loss").y.front()));
    page.row("final learning rate", "final_lr", num(last_of(m, "lr")));
    page.row("samples seen", "samples", num(last_of(m, "samples")));
    const Points t = field(m, "samples_per_s");
    double mean = std::nan("");
    if (!t.y.empty()) {
      mean = 0;
      for (double v : t.y) mean += v;
      mean /= static_cast<double>(t.y.size());
    }
    page.row("mean samples/s", "mean_samples_per_s", num(mean));
  } else {
    page.row("islands", "islands", std::to_string(n_isl));
    page.row("final step (highest of the islands)", "final_step", std::to_string(final_step));
    page.row("merges on the tape", "merges", std::to_string(merges));
    if (esum.is_object()) {
      page.row("merges with every island", "merges_with_every_island",
               std::to_string(esum.value("merges_with_every_island", std::uint64_t{0})));
      const json& fc = esum["final_cut"];
      page.row("final cut", "final_cut_reason", fc.is_object() ? fc.value("reason", "") : std::string("none"));
      page.row("final cut digest", "final_cut_digest", fc.is_object() ? fc.value("digest", "") : std::string("none"));
      std::string acked, missing;
      for (const auto& i : esum.value("per_island", json::array()))
        if (i.value("acknowledged_final_cut", false)) acked += (acked.empty() ? "" : ", ") + i.value("id", "");
      for (const auto& id : esum.value("islands_missing", json::array()))
        missing += (missing.empty() ? "" : ", ") + id.get<std::string>();
      page.row("acknowledged the final cut", "acknowledged", acked.empty() ? "none" : acked);
      page.row("missing the final cut", "missing", missing.empty() ? "none" : missing);
      if (esum.contains("result") && esum["result"].is_string())
        page.row("result", "result", fs::path(esum["result"].get<std::string>()).lexically_relative(run_dir).generic_string());
      page.row("bytes sent (all islands)", "bytes_sent_total", num(esum.value("bytes_sent_total", 0.0)));
      page.row("bytes received (all islands)", "bytes_received_total", num(esum.value("bytes_received_total", 0.0)));
      page.row("bytes sent + received (all islands)", "bytes_total", num(esum.value("bytes_total", 0.0)));
      page.row("float32 ring all-reduce, sent + received", "allreduce_equivalent_bytes_total",
               num(esum.value("allreduce_equivalent_bytes_total", 0.0)));
      if (esum.contains("allreduce_over_total"))
        page.row("all-reduce over the islands' traffic", "allreduce_over_total",
                 num(esum["allreduce_over_total"].get<double>()));
    }
    if (summary_file.is_object() && summary_file.contains("syncer_exit"))
      page.row("exit codes", "exit_codes",
               "syncer " + summary_file["syncer_exit"].dump() + ", islands " + summary_file.value("island_exits", json::array()).dump());
  }
  o << "</tbody>\n</table>\n";
  if (embedded) {
    o << "<table id=\"islands\">\n<thead><tr><th scope=\"col\">island</th><th scope=\"col\">final step</th>"
         "<th scope=\"col\">final loss</th><th scope=\"col\">final val_loss</th><th scope=\"col\">sent</th>"
         "<th scope=\"col\">received</th><th scope=\"col\">all-reduce, sent + received</th>"
         "<th scope=\"col\">holds the final cut</th></tr></thead>\n<tbody>\n";
    json per = esum.is_object() ? esum.value("per_island", json::array()) : json::array();
    for (std::size_t i = 0; i < n_isl; ++i) {
      const auto& isl = islands[i];
      const json e = i < per.size() ? per[i] : json::object();
      auto cell = [&](const std::string& key, const std::string& v) {
        o << "<td data-key=\"" << isl.label << "." << key << "\">" << html_escape(v) << "</td>";
      };
      o << "<tr><th scope=\"row\">" << isl.label << "</th>";
      cell("final_step", isl.metrics.empty() ? "n/a" : std::to_string(isl.metrics.rbegin()->first));
      cell("final_loss", num(last_of(isl.metrics, "loss")));
      cell("final_val_loss", num(last_of(isl.metrics, "val_loss")));
      cell("bytes_sent", e.contains("bytes_sent") ? bytes_text(e["bytes_sent"].get<double>()) : "n/a");
      cell("bytes_received", e.contains("bytes_received") ? bytes_text(e["bytes_received"].get<double>()) : "n/a");
      cell("allreduce_equivalent_bytes",
           e.contains("allreduce_equivalent_bytes") ? bytes_text(e["allreduce_equivalent_bytes"].get<double>()) : "n/a");
      cell("holds_final_cut", e.value("acknowledged_final_cut", false) ? "yes" : "no");
      o << "</tr>\n";
    }
    o << "</tbody>\n</table>\n";
  }

  o << "<h2>Plots</h2>\n";
  for (const auto& f : figures)
    o << "<figure><img src=\"" << url_path(f.file) << "\" alt=\"" << html_escape(f.alt) << "\" width=\"900\" height=\"420\">"
      << "<figcaption>" << html_escape(f.caption) << "</figcaption></figure>\n";

  // Validation renders: rows are prompts, columns are steps.
  const fs::path samples_dir = (embedded ? run_dir / "island-0" : run_dir) / "samples";
  std::map<std::int64_t, std::string> prompts;
  std::set<std::int64_t> steps;
  std::map<std::pair<std::int64_t, std::int64_t>, json> renders;
  for (const auto& r : read_json_lines(samples_dir / "index.jsonl")) {
    if (!r.contains("step") || !r["step"].is_number_integer() || !r.contains("path") || !r["path"].is_string()) continue;
    const std::int64_t step = r["step"].get<std::int64_t>();
    const std::int64_t p = r.contains("prompt_index") && r["prompt_index"].is_number_integer()
                               ? r["prompt_index"].get<std::int64_t>()
                               : 0;
    if (r.contains("prompt") && r["prompt"].is_string()) prompts[p] = r["prompt"].get<std::string>();
    else prompts.emplace(p, "");
    steps.insert(step);
    renders[{p, step}] = r;
  }
  if (!renders.empty()) {
    o << "<h2>Validation renders</h2>\n<div class=\"grid\"><table id=\"renders\">\n<thead><tr><th scope=\"col\">prompt</th>";
    for (auto s : steps) o << "<th scope=\"col\">step " << s << "</th>";
    o << "</tr></thead>\n<tbody>\n";
    for (const auto& [p, text] : prompts) {
      o << "<tr><th scope=\"row\">" << html_escape(text.empty() ? "prompt " + std::to_string(p) : text) << "</th>";
      for (auto s : steps) {
        const auto it = renders.find({p, s});
        if (it == renders.end()) {
          o << "<td>-</td>";
          continue;
        }
        const json& r = it->second;
        // Relative to the directory holding index.jsonl; a path that names that directory
        // itself ("samples/step-.../p0.png") is read from the one above it.
        fs::path img = r["path"].get<std::string>();
        if (img.is_relative()) {
          const fs::path near = (samples_dir / img).lexically_normal();
          const fs::path above = (samples_dir.parent_path() / img).lexically_normal();
          img = !fs::is_regular_file(near, ec) && fs::is_regular_file(above, ec) ? above : near;
        }
        img = img.lexically_normal();
        if (!fs::is_regular_file(img, ec)) {
          o << "<td>missing</td>";
          continue;
        }
        std::string dims;
        if (r.contains("width") && r["width"].is_number_integer() && r.contains("height") && r["height"].is_number_integer())
          dims = " width=\"" + std::to_string(r["width"].get<std::int64_t>()) + "\" height=\"" +
                 std::to_string(r["height"].get<std::int64_t>()) + "\"";
        std::string alt = "validation render at step " + std::to_string(s) + " of prompt " + std::to_string(p);
        if (!text.empty()) alt += ": " + text;
        if (r.contains("seed") && r["seed"].is_number()) alt += " (seed " + r["seed"].dump() + ")";
        o << "<td><img src=\"" << url_path(img.lexically_relative(out_dir)) << "\" alt=\"" << html_escape(alt) << "\""
          << dims << "></td>";
      }
      o << "</tr>\n";
    }
    o << "</tbody>\n</table></div>\n";
  }
  if (!config_text.empty())
    o << "<h2>config.toml</h2>\n<details><summary>The resolved configuration of the run</summary><pre>"
      << html_escape(config_text) << "</pre></details>\n";

  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Run report: "
       << html_escape(run_name) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n"
       << o.str() << "</body>\n</html>\n";
  atomic_write(files.index, html.str());
  return files;
}

std::optional<fs::path> try_write_report(const fs::path& run_dir, std::string& warning) {
  try {
    return write_report(run_dir).index;
  } catch (const std::exception& e) {
    warning = e.what();
  }
  return std::nullopt;
}

}  // namespace yeto::report
