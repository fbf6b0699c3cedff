// `yeto-host report RUN_DIR` on run directories written here the way the learner, the syncer and
// the validation renderer write them: every <img> of the page exists, the numbers table holds the
// final values, the plots decode at their size and are drawn (several colours, the series'
// colour), a resumed run's repeated steps count once, and Chromium renders the page from disk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <stb_image.h>
#include <stb_image_write.h>

#include "core/atomic_file.hpp"
#include "report/grid.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using yeto::test::TempDir;

namespace {

struct Decoded {
  int width = 0, height = 0;
  std::vector<unsigned char> rgb;
  bool ok() const { return width > 0 && height > 0; }
};

Decoded decode(const fs::path& p) {
  Decoded d;
  int c = 0;
  unsigned char* px = stbi_load(p.string().c_str(), &d.width, &d.height, &c, 3);
  if (!px) return {};
  d.rgb.assign(px, px + static_cast<std::size_t>(d.width) * d.height * 3);
  stbi_image_free(px);
  return d;
}

std::set<std::uint32_t> colours(const Decoded& d) {
  std::set<std::uint32_t> s;
  for (std::size_t i = 0; i + 2 < d.rgb.size(); i += 3) s.insert((d.rgb[i] << 16) | (d.rgb[i + 1] << 8) | d.rgb[i + 2]);
  return s;
}

// Pixels within `tol` of colour c on every channel.
std::size_t count_near(const Decoded& d, yeto::report::Rgb c, int tol = 0) {
  std::size_t n = 0;
  for (std::size_t i = 0; i + 2 < d.rgb.size(); i += 3)
    if (std::abs(d.rgb[i] - c.r) <= tol && std::abs(d.rgb[i + 1] - c.g) <= tol && std::abs(d.rgb[i + 2] - c.b) <= tol) ++n;
  return n;
}

void write_lines(const fs::path& p, const std::vector<json>& records, const std::string& tail = "") {
  std::string s;
  for (const auto& r : records) s += r.dump() + "\n";
  yeto::atomic_write(p, s + tail);
}

// A validation render: a solid colour, width x height.
void write_render(const fs::path& p, int w, int h, unsigned char r, unsigned char g, unsigned char b) {
  fs::create_directories(p.parent_path());
  std::vector<unsigned char> px(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < px.size(); i += 3) px[i] = r, px[i + 1] = g, px[i + 2] = b;
  ASSERT_TRUE(stbi_write_png(p.string().c_str(), w, h, 3, px.data(), w * 3));
}

std::string fmt(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

double loss_at(std::int64_t step, double life = 0) { return 1.0 / (1.0 + 0.1 * static_cast<double>(step)) + life; }

// metrics.jsonl as the learner writes it: a val_loss record at step 0, then one record a step.
std::vector<json> metrics(std::int64_t from, std::int64_t to, double life = 0, std::int64_t val_every = 5) {
  std::vector<json> out;
  if (from == 1) out.push_back({{"step", 0}, {"val_loss", 1.2 + life}});
  for (std::int64_t s = from; s <= to; ++s) {
    json r = {{"step", s},          {"loss", loss_at(s, life)}, {"lr", 1e-4 * std::min<double>(1.0, s / 4.0)},
              {"grad_norm", 0.5},   {"samples", s * 4},         {"samples_per_s", 10.0 + static_cast<double>(s % 3)},
              {"peak_rss_mb", 300}, {"epoch", 0}};
    if (s % val_every == 0) r["val_loss"] = 1.1 - 0.01 * static_cast<double>(s) + life;
    out.push_back(r);
  }
  return out;
}

struct Page {
  std::string html;
  std::vector<std::string> img_src;
  std::map<std::string, std::string> values;  // data-key -> cell text
};

std::string url_decode(const std::string& s) {
  std::string o;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      o += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      o += s[i];
    }
  }
  return o;
}

Page parse(const fs::path& index) {
  Page p;
  p.html = yeto::test::read_text(index);
  const std::regex img(R"re(<img\b[^>]*\bsrc="([^"]*)"[^>]*>)re");
  for (auto it = std::sregex_iterator(p.html.begin(), p.html.end(), img); it != std::sregex_iterator(); ++it) {
    p.img_src.push_back((*it)[1]);
    EXPECT_NE(it->str().find(" alt=\""), std::string::npos) << "an image without alt text: " << it->str();
  }
  const std::regex cell(R"re(<td data-key="([^"]*)">([^<]*)</td>)re");
  for (auto it = std::sregex_iterator(p.html.begin(), p.html.end(), cell); it != std::sregex_iterator(); ++it)
    p.values[(*it)[1]] = (*it)[2];
  return p;
}

// Every image the page shows exists beside it (relative paths only: the page opens from disk).
void expect_images_exist(const fs::path& index, const Page& p) {
  for (const auto& src : p.img_src) {
    EXPECT_EQ(src.find("://"), std::string::npos) << src;
    EXPECT_FALSE(fs::path(src).is_absolute()) << src;
    const fs::path f = index.parent_path() / url_decode(src);
    EXPECT_TRUE(fs::is_regular_file(f)) << src << " -> " << f;
    EXPECT_TRUE(decode(f).ok()) << f;
  }
}

// A plot: its size, several colours, and the colour of series `k` drawn.
void expect_plot(const fs::path& png, std::initializer_list<std::size_t> series) {
  const Decoded d = decode(png);
  ASSERT_TRUE(d.ok()) << png;
  EXPECT_EQ(d.width, 900) << png;
  EXPECT_EQ(d.height, 420) << png;
  EXPECT_GE(colours(d).size(), 4u) << png;
  for (std::size_t k : series) {
    const auto c = yeto::report::palette(k);
    EXPECT_GT(count_near(d, c), 40u) << png << ": series colour " << k << " is not drawn";
  }
}

yeto::test::ProcessResult report(const fs::path& run) { return yeto::test::run_host({"report", run.string()}); }

void write_single_run(const fs::path& run) {
  fs::create_directories(run);
  yeto::atomic_write(run / "config.toml",
                     "[model]\nid = \"tiny/model\"  # the base model\n\n[train]\nmax_steps = 20\n\n[optimizer]\n"
                     "learning_rate = 0.0001\n");
  write_lines(run / "metrics.jsonl", metrics(1, 20));
  // Validation renders: 2 prompts at steps 10 and 20 (and a listed file that is missing).
  std::vector<json> idx;
  for (int step : {10, 20})
    for (int p = 0; p < 2; ++p) {
      char rel[64];
      std::snprintf(rel, sizeof rel, "samples/step-%08d/p%d.png", step, p);
      write_render(run / rel, 32, 24, static_cast<unsigned char>(40 * step / 10), 200, static_cast<unsigned char>(100 * p));
      // Paths relative to samples/, or naming samples/ itself as the renderer may write them.
      idx.push_back({{"step", step}, {"prompt_index", p}, {"prompt", p == 0 ? "a red fox & <a> hat" : "a blue lake"},
                     {"seed", 7 + p}, {"path", p == 0 ? std::string(rel).substr(8) : std::string(rel)},
                     {"width", 32}, {"height", 24}});
    }
  write_lines(run / "samples" / "index.jsonl", idx);
}

}  // namespace

TEST(Report, AFinishedSingleRun) {
  TempDir dir;
  const fs::path run = dir / "run";
  write_single_run(run);
  const auto r = report(run);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const fs::path index = run / "report" / "index.html";
  EXPECT_NE(r.out.find("report: " + index.string()), std::string::npos) << r.out;
  ASSERT_TRUE(fs::is_regular_file(index));
  const Page p = parse(index);
  expect_images_exist(index, p);
  // Three plots and the 2 x 2 grid of renders, referenced from the run's samples/.
  EXPECT_EQ(p.img_src.size(), 7u) << p.html;
  for (const char* f : {"loss.png", "lr.png", "throughput.png"})
    EXPECT_NE(std::find(p.img_src.begin(), p.img_src.end(), f), p.img_src.end()) << f;
  EXPECT_NE(std::find(p.img_src.begin(), p.img_src.end(), "../samples/step-00000020/p1.png"), p.img_src.end());
  EXPECT_NE(std::find(p.img_src.begin(), p.img_src.end(), "../samples/step-00000010/p0.png"), p.img_src.end());
  EXPECT_EQ(p.values.at("final_step"), "20");
  EXPECT_EQ(p.values.at("final_loss"), fmt(loss_at(20)));
  EXPECT_EQ(p.values.at("final_val_loss"), fmt(1.1 - 0.2));
  EXPECT_EQ(p.values.at("first_val_loss"), fmt(1.2));
  EXPECT_EQ(p.values.at("final_lr"), fmt(1e-4));
  EXPECT_EQ(p.values.at("samples"), "80");
  EXPECT_EQ(p.values.at("config.model.id"), "tiny/model");
  EXPECT_EQ(p.values.at("config.train.max_steps"), "20");
  // Prompts are escaped; rows are prompts, columns steps.
  EXPECT_NE(p.html.find("a red fox &amp; &lt;a&gt; hat"), std::string::npos);
  EXPECT_NE(p.html.find("<th scope=\"col\">step 10</th><th scope=\"col\">step 20</th>"), std::string::npos);
  // Self-contained: no script, no remote resource.
  EXPECT_EQ(p.html.find("<script"), std::string::npos);
  EXPECT_EQ(p.html.find("http"), std::string::npos);
  expect_plot(run / "report" / "loss.png", {0, 1});
  expect_plot(run / "report" / "lr.png", {0});
  expect_plot(run / "report" / "throughput.png", {0});
  // The same inputs give the same files.
  const std::string html = p.html, loss = yeto::read_file(run / "report" / "loss.png");
  ASSERT_EQ(report(run).exit_code, 0);
  EXPECT_EQ(yeto::read_file(index), html);
  EXPECT_EQ(yeto::read_file(run / "report" / "loss.png"), loss);
}

TEST(Report, AResumedRunDrawsEveryStepOnce) {
  // The first life ran to step 15 with losses 5 higher; the resumed life restarts after the
  // checkpoint at step 10 and runs to 20; a torn last line is skipped.
  TempDir dir;
  const fs::path run = dir / "run";
  fs::create_directories(run);
  auto recs = metrics(1, 15, 5.0);
  for (const auto& r : metrics(11, 20)) recs.push_back(r);
  write_lines(run / "metrics.jsonl", recs, "{\"step\": 21, \"loss\": 9");
  const auto m = yeto::report::read_metrics(run / "metrics.jsonl");
  ASSERT_EQ(m.size(), 21u);  // steps 0..20, once each
  EXPECT_EQ(m.begin()->first, 0);
  EXPECT_EQ(m.rbegin()->first, 20);
  EXPECT_DOUBLE_EQ(m.at(10)["loss"].get<double>(), loss_at(10, 5.0));  // before the checkpoint: the first life
  EXPECT_DOUBLE_EQ(m.at(12)["loss"].get<double>(), loss_at(12));       // after it: the resumed life only
  EXPECT_DOUBLE_EQ(m.at(15)["val_loss"].get<double>(), 1.1 - 0.15);
  EXPECT_DOUBLE_EQ(m.at(0)["val_loss"].get<double>(), 1.2 + 5.0);

  const auto r = report(run);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const Page p = parse(run / "report" / "index.html");
  expect_images_exist(run / "report" / "index.html", p);
  EXPECT_EQ(p.values.at("final_step"), "20");
  EXPECT_EQ(p.values.at("final_loss"), fmt(loss_at(20)));
  EXPECT_EQ(p.html.find("id=\"renders\""), std::string::npos) << "no renders were listed";
  expect_plot(run / "report" / "loss.png", {0, 1});
  EXPECT_EQ(p.values.at("first_val_loss"), fmt(1.2 + 5.0));
}

TEST(Report, AnEmbeddedRunWithATapeAndSyncEvents) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::uint64_t numel = 1000;
  for (int i = 0; i < 2; ++i) {
    const fs::path isl = run / ("island-" + std::to_string(i));
    fs::create_directories(isl);
    write_lines(isl / "metrics.jsonl", metrics(1, 8 + i, 0.1 * i, 4));
    write_lines(isl / "sync_events.jsonl",
                {{{"event", "joined"}},
                 {{"event", "closed"}, {"steps", 8 + i}, {"bytes_sent", 3000 + 1000 * i}, {"bytes_received", 5000},
                  {"pushes_sent", 4}, {"numel", numel}},
                 {{"event", "final_applied"}, {"matches", true}}});
  }
  fs::create_directories(run / "syncer");
  // A rotated tape with the first merges, then the current one.
  double t = 1000.0;
  std::uint64_t seq = 0;
  auto rec = [&](const std::string& ev, std::int64_t frag, std::uint64_t ver, std::vector<std::string> learners) {
    t += 1.5;
    return json{{"seq", ++seq}, {"event", ev}, {"time", t}, {"fragment", frag}, {"version", ver}, {"learners", learners}};
  };
  std::vector<json> old_tape = {rec("start", -1, 0, {}), rec("merge", 0, 1, {"island-0", "island-1"}),
                                rec("merge", 1, 1, {"island-0"})};
  std::vector<json> tape = {rec("merge", 0, 2, {"island-0", "island-1"}), rec("merge", 1, 2, {"island-0", "island-1"})};
  json cut = rec("final_cut", -1, 0, {});
  cut["reason"] = "learners_done";
  cut["digest"] = "0123456789abcdef0123456789abcdef";
  cut["outer_steps"] = 4;
  tape.push_back(cut);
  json ack = rec("final_ack", -1, 0, {"island-0", "island-1"});
  ack["ok"] = true;
  tape.push_back(ack);
  write_lines(run / "syncer" / "tape.1.jsonl", old_tape);
  write_lines(run / "syncer" / "tape.jsonl", tape);
  yeto::atomic_write(run / "syncer" / "final.json", json{{"acked", {"island-0", "island-1"}}}.dump());
  yeto::atomic_write(run / "syncer" / "final_cut.bin", "cut");
  yeto::atomic_write(run / "summary.json", json{{"islands", 2}, {"syncer_exit", 0}, {"island_exits", {0, 0}}}.dump());
  yeto::atomic_write(run / "config.toml", "[sync]\nislands = 2\nfragments = 2\n");
  // Renders of island 0.
  write_render(run / "island-0" / "samples" / "step-00000004" / "p0.png", 16, 16, 250, 10, 10);
  write_lines(run / "island-0" / "samples" / "index.jsonl",
              {{{"step", 4}, {"prompt_index", 0}, {"prompt", "a cat"}, {"seed", 1}, {"path", "step-00000004/p0.png"},
                {"width", 16}, {"height", 16}}});

  const auto r = report(run);
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const fs::path index = run / "report" / "index.html";
  const Page p = parse(index);
  expect_images_exist(index, p);
  EXPECT_EQ(p.img_src.size(), 6u) << p.html;  // loss, lr, throughput, merges, traffic, one render
  EXPECT_NE(std::find(p.img_src.begin(), p.img_src.end(), "../island-0/samples/step-00000004/p0.png"), p.img_src.end());
  EXPECT_EQ(p.values.at("islands"), "2");
  EXPECT_EQ(p.values.at("final_step"), "9");
  EXPECT_EQ(p.values.at("merges"), "4");  // the rotated tape's merges count too
  EXPECT_EQ(p.values.at("merges_with_every_island"), "3");
  EXPECT_EQ(p.values.at("final_cut_reason"), "learners_done");
  EXPECT_EQ(p.values.at("final_cut_digest"), "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(p.values.at("acknowledged"), "island-0, island-1");
  EXPECT_EQ(p.values.at("missing"), "none");
  EXPECT_EQ(p.values.at("bytes_sent_total"), "7000");
  EXPECT_EQ(p.values.at("bytes_received_total"), "10000");
  EXPECT_EQ(p.values.at("bytes_total"), "17000");
  // A float32 ring all-reduce over 2 islands, both ways: 2 x 2(2-1)/2 x 4 x numel bytes a step.
  const double ar = (8 + 9) * 2.0 * 4.0 * static_cast<double>(numel);
  EXPECT_EQ(p.values.at("allreduce_equivalent_bytes_total"), fmt(ar));
  EXPECT_EQ(p.values.at("allreduce_over_total"), fmt(ar / 17000.0));
  EXPECT_EQ(p.values.at("island-1.final_step"), "9");
  EXPECT_EQ(p.values.at("island-1.final_loss"), fmt(loss_at(9, 0.1)));
  EXPECT_EQ(p.values.at("island-0.final_val_loss"), fmt(1.1 - 0.08));
  EXPECT_EQ(p.values.at("island-0.holds_final_cut"), "yes");
  EXPECT_EQ(p.values.at("exit_codes"), "syncer 0, islands [0,0]");
  // One line per island (loss: palette 0 and 2, val_loss 1 and 3), the merges' fragments, the traffic bars.
  expect_plot(run / "report" / "loss.png", {0, 1, 2, 3});
  expect_plot(run / "report" / "lr.png", {0, 1});
  expect_plot(run / "report" / "merges.png", {0, 1});
  expect_plot(run / "report" / "traffic.png", {0, 1, 2, 4});
}

TEST(Report, ARunDirectoryWithNothingToReportIsAnError) {
  TempDir dir;
  fs::create_directories(dir / "empty");
  const auto r = report(dir / "empty");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("holds no metrics.jsonl"), std::string::npos) << r.all();
  const auto missing = report(dir / "nowhere");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("is not a run directory"), std::string::npos) << missing.all();
}

// At the end of a run a report that cannot be written is a warning with the reason, not an error.
TEST(Report, AReportThatCannotBeWrittenIsAWarning) {
  TempDir dir;
  const fs::path run = dir / "run";
  write_single_run(run);
  yeto::atomic_write(run / "report", "a file where the report's directory goes");
  std::string warning;
  EXPECT_FALSE(yeto::report::try_write_report(run, warning).has_value());
  EXPECT_FALSE(warning.empty());
  fs::remove(run / "report");
  warning.clear();
  const auto index = yeto::report::try_write_report(run, warning);
  ASSERT_TRUE(index.has_value()) << warning;
  EXPECT_EQ(*index, run / "report" / "index.html");
}

TEST(ReportPlot, TicksAreRoundNumbersAndEmptyPlotsAreDrawn) {
  using yeto::report::nice_ticks;
  using yeto::report::tick_label;
  EXPECT_EQ(nice_ticks(0, 20), (std::vector<double>{0, 5, 10, 15, 20}));
  const auto t = nice_ticks(0.13, 0.92);
  EXPECT_DOUBLE_EQ(t.front(), 0.0);
  EXPECT_NEAR(t.back(), 1.0, 1e-12);
  EXPECT_EQ(tick_label(0.2, 0.2), "0.2");
  EXPECT_EQ(tick_label(1500, 500), "1500");
  EXPECT_EQ(tick_label(2e-5, 1e-5), "2e-05");
  EXPECT_EQ(nice_ticks(0, 2, 6, 1.0), (std::vector<double>{0, 1, 2}));  // counts: whole numbers
  yeto::report::LinePlot empty;
  empty.title = "nothing";
  const auto img = yeto::report::render(empty);
  EXPECT_EQ(img.width, 900);
  EXPECT_EQ(img.rgb.size(), 900u * 420u * 3u);
}

// `sample --grid`'s labelled grid: titles on top, one row per label, cells scaled by nearest
// neighbour to the cell side; long labels wrap at spaces; mismatched rows are refused.
TEST(ReportGrid, CellsAreScaledIntoTheirRowsAndLabelsWrap) {
  using yeto::report::Image;
  using yeto::report::Rgb;
  EXPECT_EQ(yeto::report::wrap_text("a red square on a blue background", 36),
            (std::vector<std::string>{"a red", "square", "on a", "blue", "backgr", "ound"}));
  EXPECT_EQ(yeto::report::wrap_text("one two", 1000), (std::vector<std::string>{"one two"}));
  yeto::report::GridSpec spec;
  spec.column_titles = {"base model", "base model + adapter"};
  spec.row_labels = {"a red square", "a blue bar on a white background, a label long enough to wrap twice or more"};
  const Rgb red{255, 0, 0}, blue{0, 0, 255}, white{255, 255, 255};
  Image a(8, 8, red), b(8, 8, blue);
  b.set(0, 0, white);  // its top-left pixel becomes a 24 x 24 square at cell side 192
  spec.cells = {{a, b}, {b, a}};
  spec.cell_side = 192;
  spec.label_width = 200;
  const Image g = yeto::report::labelled_grid(spec);
  EXPECT_EQ(g.width, 200 + 2 * (192 + 16));
  // Header (two title lines: the second title wraps), then rows of at least cell + padding.
  const int header = 2 * 20 + 16;
  EXPECT_GE(g.height, header + 2 * (192 + 16));
  const int x0 = 200 + 8, x1 = 200 + 192 + 16 + 8, y0 = header + 8;
  EXPECT_EQ(g.at(x0 + 100, y0 + 100), red);
  EXPECT_EQ(g.at(x1 + 100, y0 + 100), blue);
  EXPECT_EQ(g.at(x1 + 23, y0 + 23), white);
  EXPECT_EQ(g.at(x1 + 24, y0 + 24), blue);
  // The label and title text is drawn in dark ink left of and above the cells.
  int ink = 0;
  for (int y = 0; y < g.height; ++y)
    for (int x = 0; x < 200; ++x) ink += g.at(x, y).r < 100;
  EXPECT_GT(ink, 200);
  spec.cells.pop_back();
  EXPECT_THROW(yeto::report::labelled_grid(spec), std::invalid_argument);
}

// The page as a browser shows it: headless Chromium opens index.html from disk and its screenshot
// holds the plots' colours.
TEST(Report, ChromiumRendersThePageFromDisk) {
  const fs::path chromium = "/usr/bin/chromium";
  ASSERT_TRUE(fs::exists(chromium)) << "/usr/bin/chromium is not installed: scripts/setup.sh installs Debian's "
                                       "chromium package (apt-get install -y chromium)";
  TempDir dir;
  const fs::path run = dir / "run";
  write_single_run(run);
  ASSERT_EQ(report(run).exit_code, 0);
  const fs::path shot = dir / "screenshot.png";
  const auto r = yeto::test::run_process(
      {"/usr/bin/timeout", "120", chromium.string(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
       "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
       "--user-data-dir=" + (dir / "chromium-profile").string(), "--window-size=1200,2000",
       "--screenshot=" + shot.string(), "file://" + (run / "report" / "index.html").string()},
      dir.path().string(), {{"HOME", dir.path().string()}});
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const Decoded d = decode(shot);
  ASSERT_TRUE(d.ok()) << "the screenshot does not decode: " << r.all();
  EXPECT_EQ(d.width, 1200);
  EXPECT_EQ(d.height, 2000);
  std::cout << "chromium screenshot " << d.width << "x" << d.height << ": " << colours(d).size()
            << " distinct colours, " << count_near(d, yeto::report::palette(0), 8) << " pixels of the loss colour, "
            << count_near(d, yeto::report::palette(1), 8) << " of the val_loss colour\n";
  EXPECT_GE(colours(d).size(), 20u) << "the screenshot is blank";
  // The loss line (palette 0) and the val_loss markers (palette 1) appear on the page.
  EXPECT_GT(count_near(d, yeto::report::palette(0), 8), 100u);
  EXPECT_GT(count_near(d, yeto::report::palette(1), 8), 20u);
}
