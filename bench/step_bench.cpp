// A family's LoRA training step on CPU, through the plugin and the learner's own step code, timed
// by phase the way metrics.jsonl splits a step (data, forward+loss, backward, optimizer), with a
// roofline measured in the same run: every GEMM the step runs (aten::mm / addmm / bmm / baddbmm,
// forward and backward, recorded with their shapes, layouts and dtypes) is replayed as a plain
// LibTorch call on fresh tensors, and the step's GEMM GFLOP/s is printed as a fraction of that
// replay's. The fraction is what to compare across machines: 1.0 means the step costs no more
// than its GEMMs.
//
// Each configuration is one of the family plugin's init-model presets (a few keys patched, see
// kConfigs), opened as the learner opens a repository (Pipeline::open, random seeded weights,
// prepare with LoRA r on to_q / to_k / to_v / to_out.0, model.precision fp32 or bf16: the frozen
// base converted once, LoRA masters, optimizer and loss float32). The media are encoded and the
// prompts embedded once (a cached-latents run); each step then draws its micro batch from that
// cache (data), runs learner::diffusion_loss (timesteps, noise, the scheduler's training batch,
// denoiser_kwargs, denoise, align, weighted MSE: forward), backward, and the learner's gradient
// clipping and AdamW (optimizer). bf16/fp32 is the step-time ratio.
//
//   step_bench --family flux|sd35|pixart|ltx|wan [--configs tiny,mid,wide] [--precisions fp32,bf16]
//              [--iters N] [--threads T] [--profile] [--gemms] [--plugins DIR] [--work DIR]
//   --profile also prints the step's top ATen operators by self time, --gemms the step's GEMMs
//   grouped by operand shapes.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "initmodel/init_model.hpp"
#include "io/repository.hpp"
#include "learner/adamw.hpp"
#include "learner/loss.hpp"
#include "learner/model.hpp"
#include "learner/settings.hpp"
#include "learner/timesteps.hpp"
#include "pipeline/pipeline.hpp"
#include "runtime/torch_runtime.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- configurations -------------------------------------------------------------------------

struct Setup {
  std::string name;
  std::string preset;
  json patch;  // component -> merge patch over the preset's config
  std::int64_t height, width, frames;  // frames 0: an image family
  std::int64_t batch, rank;
  std::int64_t text_len;  // model.max_sequence_length (0: the family's default)
};

// tiny: the tests' repository shapes; mid: a CPU-sized layout; wide: the released model's widths
// with one or two blocks, at a small resolution so a step stays within seconds.
const std::map<std::string, std::vector<Setup>>& configs() {
  static const std::map<std::string, std::vector<Setup>> c = {
      {"flux",
       {{"tiny", "tiny", json::object(), 64, 64, 0, 2, 4, 32},
        // The mid config Diffusers + PEFT was measured on: 2 double + 4 single blocks, 4 heads x 64.
        {"mid", "mid", {{"transformer", {{"num_layers", 2}, {"num_single_layers", 4}, {"num_attention_heads", 4}}}},
         256, 256, 0, 2, 16, 64},
        {"wide", "wide", {{"transformer", {{"num_single_layers", 1}}}}, 128, 128, 0, 1, 16, 32}}},
      {"sd35",
       {{"tiny", "tiny", json::object(), 64, 64, 0, 2, 4, 32},
        {"mid", "mid", json::object(), 256, 256, 0, 2, 16, 64},
        {"wide", "wide", json::object(), 128, 128, 0, 1, 16, 32}}},
      {"pixart",
       {{"tiny", "tiny", json::object(), 64, 64, 0, 2, 4, 0},
        // PixArt-XL's layout at CPU size: 6 blocks, 4 heads x 64 (inner 256), T5 d_model 256.
        {"mid", "tiny",
         {{"transformer",
           {{"num_layers", 6},
            {"num_attention_heads", 4},
            {"attention_head_dim", 64},
            {"cross_attention_dim", 256},
            {"caption_channels", 256},
            {"sample_size", 32}}},
          {"text_encoder", {{"d_model", 256}, {"d_kv", 64}, {"num_heads", 4}, {"d_ff", 640}, {"num_layers", 2}}}},
         256, 256, 0, 2, 16, 0},
        {"wide", "wide", json::object(), 256, 256, 0, 1, 16, 0}}},
      {"ltx",
       {{"tiny", "tiny", json::object(), 128, 128, 9, 2, 4, 32},
        {"mid", "small", json::object(), 256, 256, 9, 2, 16, 64},
        {"wide", "wide", json::object(), 256, 256, 9, 1, 16, 32}}},
      {"wan",
       {{"tiny", "tiny", json::object(), 64, 64, 5, 2, 4, 32},
        {"mid", "mid", json::object(), 128, 128, 9, 2, 16, 64},
        {"wide", "wide", json::object(), 128, 128, 5, 1, 16, 32}}}};
  return c;
}

// ---- GEMM capture and replay ----------------------------------------------------------------

struct Gemm {
  std::string op;  // aten::mm, aten::addmm, aten::bmm, aten::baddbmm
  std::vector<std::int64_t> a, b;  // operand sizes
  bool a_t = false, b_t = false;   // operand is a transposed view (column-major)
  at::ScalarType dtype = at::kFloat;
  double flops() const {
    const double batch = a.size() == 3 ? static_cast<double>(a[0]) : 1.0;
    const auto n = a.size();
    return 2.0 * batch * static_cast<double>(a[n - 2]) * static_cast<double>(a[n - 1]) *
           static_cast<double>(b[b.size() - 1]);
  }
};

std::mutex sink_mutex;
std::vector<Gemm>* gemm_sink = nullptr;

bool transposed(const at::Tensor& t) {
  const auto n = t.dim();
  return t.stride(n - 2) == 1 && t.size(n - 2) > 1 && t.stride(n - 1) != 1;
}

std::unique_ptr<at::ObserverContext> on_gemm(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  if (name != "aten::mm" && name != "aten::addmm" && name != "aten::bmm" && name != "aten::baddbmm") return nullptr;
  const auto in = fn.inputs();
  const std::size_t first = (name == "aten::addmm" || name == "aten::baddbmm") ? 1 : 0;
  if (in.size() < first + 2 || !in[first].isTensor() || !in[first + 1].isTensor()) return nullptr;
  const auto& a = in[first].toTensor();
  const auto& b = in[first + 1].toTensor();
  Gemm g{name, a.sizes().vec(), b.sizes().vec(), transposed(a), transposed(b), a.scalar_type()};
  std::lock_guard<std::mutex> lock(sink_mutex);
  if (gemm_sink) gemm_sink->push_back(std::move(g));
  return nullptr;
}

at::Tensor operand(const std::vector<std::int64_t>& sizes, bool t, at::ScalarType dtype) {
  if (!t) return at::randn(sizes).to(dtype);
  auto s = sizes;
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  return at::randn(s).to(dtype).transpose(-1, -2);
}

// Seconds one pass over `gemms` takes as plain LibTorch calls (best of `reps`).
double replay_seconds(const std::vector<Gemm>& gemms, int reps) {
  struct Call {
    const Gemm* g;
    at::Tensor a, b, c;
  };
  std::vector<Call> calls;
  for (const auto& g : gemms) {
    Call c{&g, operand(g.a, g.a_t, g.dtype), operand(g.b, g.b_t, g.dtype), {}};
    if (g.op == "aten::addmm") c.c = at::zeros({g.b.back()}, at::TensorOptions().dtype(g.dtype));
    if (g.op == "aten::baddbmm") c.c = at::zeros({g.a[0], g.a[1], g.b[2]}, at::TensorOptions().dtype(g.dtype));
    calls.push_back(std::move(c));
  }
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    for (const auto& c : calls) {
      if (c.g->op == "aten::mm") (void)at::mm(c.a, c.b);
      else if (c.g->op == "aten::addmm") (void)at::addmm(c.c, c.a, c.b);
      else if (c.g->op == "aten::bmm") (void)at::bmm(c.a, c.b);
      else (void)at::baddbmm(c.c, c.a, c.b);
    }
    if (r > 0) best = std::min(best, since(t0));  // the first pass warms caches and primitives
  }
  return best;
}

// The GEMMs grouped by operator, operand shapes and dtype, largest total first.
void print_gemms(const std::vector<Gemm>& gemms, const std::string& what) {
  std::map<std::string, std::pair<int, double>> by_shape;
  for (const auto& g : gemms) {
    std::ostringstream key;
    key << g.op << " " << c10::IntArrayRef(g.a) << (g.a_t ? "T" : "") << " x " << c10::IntArrayRef(g.b)
        << (g.b_t ? "T" : "") << " " << c10::toString(g.dtype);
    auto& e = by_shape[key.str()];
    e.first += 1;
    e.second += g.flops();
  }
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [key, e] : by_shape) rows.emplace_back(e.second, key + " x" + std::to_string(e.first));
  std::sort(rows.rbegin(), rows.rend());
  std::printf("  gemms %s: %zu calls, %zu shapes\n", what.c_str(), gemms.size(), rows.size());
  for (const auto& [flops, row] : rows) std::printf("    %9.4f GFLOP  %s\n", flops / 1e9, row.c_str());
}

// ---- self-time profile ----------------------------------------------------------------------

struct Frame {
  Clock::time_point start;
  double children = 0;
};
thread_local std::vector<Frame> frames;
std::map<std::string, std::pair<double, int>>* profile_sink = nullptr;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) {
  frames.push_back({Clock::now(), 0});
  return nullptr;
}
void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  if (frames.empty()) return;
  const auto f = frames.back();
  frames.pop_back();
  const double total = since(f.start);
  if (!frames.empty()) frames.back().children += total;
  std::lock_guard<std::mutex> lock(sink_mutex);
  if (profile_sink) {
    auto& e = (*profile_sink)[fn.name()];
    e.first += total - f.children;
    e.second += 1;
  }
}

// Records GEMMs (and, with `profile`, operator self times) while it lives.
class Recording {
 public:
  Recording(std::vector<Gemm>* gemms, std::map<std::string, std::pair<double, int>>* profile) {
    if (gemms) {
      gemm_sink = gemms;
      gemm_handle_ = at::addGlobalCallback(at::RecordFunctionCallback(on_gemm).needsInputs(true));
    }
    if (profile) {
      profile_sink = profile;
      profile_handle_ = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit));
    }
  }
  ~Recording() {
    if (gemm_handle_) at::removeCallback(gemm_handle_);
    if (profile_handle_) at::removeCallback(profile_handle_);
    gemm_sink = nullptr;
    profile_sink = nullptr;
  }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

 private:
  at::CallbackHandle gemm_handle_ = 0, profile_handle_ = 0;
};

// ---- one configuration ----------------------------------------------------------------------

struct Options {
  std::string family;
  fs::path plugins, work;
  int iters = 5, threads = 2;
  bool profile = false;
  bool gemms = false;  // print the step's GEMMs by shape
  std::string targets = R"(["to_q", "to_k", "to_v", "to_out.0"])";
};

struct Result {
  double data = 0, fwd = 0, bwd = 0, opt = 0, step = 0;
  double gemm_flops = 0, roofline = 0;
  double first_loss = 0;
  std::string tokens;  // the denoiser's input shape, for the header line
};

// The preset (patched) written as a repository's configs: weights are drawn at open.
fs::path write_repository(const Options& o, const yeto::initmodel::FamilyPresets& fp, const Setup& s) {
  if (!fp.presets.contains(s.preset))
    throw std::runtime_error("plugin '" + fp.plugin + "' has no preset '" + s.preset + "'");
  json preset = fp.presets.at(s.preset);
  for (const auto& [component, patch] : s.patch.items()) preset["components"][component]["config"].merge_patch(patch);
  const fs::path dir = o.work / (o.family + "-" + s.name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  yeto::initmodel::write_preset_files(dir, preset, "step_bench " + o.family + " " + s.name);
  return dir;
}

std::vector<yeto::config::Override> overrides(const Options& o) {
  return {{"plugins.dirs", json::array({o.plugins.string()}).dump(), "step_bench"},
          {"run.device", "cpu", "step_bench"},
          {"run.threads", std::to_string(o.threads), "step_bench"}};
}

Result run(const Options& o, const fs::path& repo, const Setup& s, const std::string& precision) {
  namespace learner = yeto::learner;
  auto ov = overrides(o);
  ov.push_back({"model.id", repo.string(), "step_bench"});
  ov.push_back({"model.adapter", o.family, "step_bench"});
  ov.push_back({"model.precision", precision, "step_bench"});
  ov.push_back({"model.max_sequence_length", std::to_string(s.text_len), "step_bench"});
  ov.push_back({"lora.r", std::to_string(s.rank), "step_bench"});
  ov.push_back({"lora.alpha", std::to_string(s.rank), "step_bench"});
  ov.push_back({"lora.targets", o.targets, "step_bench"});
  const auto cfg = yeto::config::Config::resolve(std::nullopt, ov);
  yeto::pipeline::OpenOptions open;
  open.load_weights = false;  // seeded random weights: the step's cost does not depend on them
  at::manual_seed(0);
  auto pipe = yeto::pipeline::Pipeline::open(cfg, open);
  yeto::runtime::configure_threads(o.threads);
  auto model = learner::make_plugin_model(pipe->plugin(), pipe->scheduler(), pipe->denoisers(),
                                          learner::boundary_ratio_of(pipe->plan(), pipe->repo().model_index()));
  const auto settings = learner::read_settings(cfg);
  const auto trainable = model->trainable();
  learner::AdamW adam(trainable, settings.optimizer);

  // The cache: 2 x batch rows of latents and conditioning, encoded once.
  const std::int64_t rows = 2 * s.batch;
  at::Tensor latents;
  learner::NamedTensors cond;
  {
    at::NoGradGuard no_grad;
    const auto gen = learner::make_generator(7);
    std::vector<std::int64_t> shape = {rows, 3};
    if (s.frames > 0) shape.push_back(s.frames);
    shape.push_back(s.height);
    shape.push_back(s.width);
    const auto pixels = at::rand(shape, gen) * 2 - 1;
    latents = model->encode_media(pixels, false, 0).to(at::kFloat);
    std::vector<std::string> prompts;
    for (std::int64_t i = 0; i < rows; ++i) prompts.push_back("a photo of test pattern number " + std::to_string(i));
    cond = model->encode_conditioning(prompts, {});
    for (auto& [name, t] : cond) t = t.detach();
  }

  Result r;
  {
    std::ostringstream shape;
    shape << "latents " << latents.sizes().slice(1);
    for (const auto& [name, t] : cond)
      if (name == "prompt_embeds") shape << ", prompt_embeds " << t.sizes().slice(1);
    r.tokens = shape.str();
  }
  std::vector<Gemm> gemms;
  std::map<std::string, std::pair<double, int>> prof;
  auto step = [&](int i) {
    const auto t0 = Clock::now();
    // data: the micro batch's rows from the cache
    const auto idx = (at::arange(s.batch, at::kLong) + (i * s.batch) % rows) % rows;
    const auto x0 = latents.index_select(0, idx);
    learner::NamedTensors c;
    for (const auto& [name, t] : cond)
      c.emplace_back(name, t.dim() > 0 && t.size(0) == rows ? t.index_select(0, idx) : t);
    const auto t1 = Clock::now();
    std::optional<Recording> rec;
    if (i == 0) rec.emplace(&gemms, nullptr);
    if (o.profile && i == 1) rec.emplace(nullptr, &prof);
    at::manual_seed(1000 + static_cast<std::uint64_t>(i));
    auto gen = learner::make_generator(2000 + static_cast<std::uint64_t>(i));
    const auto loss = learner::diffusion_loss(*model, settings, x0, c, gen);
    const auto t2 = Clock::now();
    loss.backward();
    const auto t3 = Clock::now();
    rec.reset();
    (void)learner::clip_grad_norm(trainable, settings.max_grad_norm);
    adam.step(learner::learning_rate_at(settings.optimizer, i + 1));
    adam.zero_grad();
    const auto t4 = Clock::now();
    if (i == 0) r.first_loss = loss.item().toDouble();
    return std::array<double, 4>{std::chrono::duration<double>(t1 - t0).count(),
                                 std::chrono::duration<double>(t2 - t1).count(),
                                 std::chrono::duration<double>(t3 - t2).count(),
                                 std::chrono::duration<double>(t4 - t3).count()};
  };
  (void)step(0);  // warm-up (allocator, oneDNN primitives) and the GEMM capture
  if (o.profile) (void)step(1);
  // Best of `iters` steps: on a shared machine the minimum is the step's own cost.
  r.step = 1e30;
  for (int i = 0; i < o.iters; ++i) {
    const auto ph = step(2 + i);
    const double total = ph[0] + ph[1] + ph[2] + ph[3];
    if (total < r.step) {
      r.step = total;
      r.data = ph[0], r.fwd = ph[1], r.bwd = ph[2], r.opt = ph[3];
    }
  }
  for (const auto& g : gemms) r.gemm_flops += g.flops();
  r.roofline = replay_seconds(gemms, std::max(2, o.iters));
  if (o.gemms) print_gemms(gemms, o.family + " " + s.name + " " + precision);
  if (o.profile) {
    std::vector<std::pair<double, std::string>> top;
    double all = 0;
    for (const auto& [name, e] : prof) {
      top.emplace_back(e.first, name + " x" + std::to_string(e.second));
      all += e.first;
    }
    std::sort(top.rbegin(), top.rend());
    std::printf("  profile %s %s %s: %.4f s in operators (self time)\n", o.family.c_str(), s.name.c_str(),
                precision.c_str(), all);
    for (std::size_t i = 0; i < top.size() && i < 18; ++i)
      std::printf("    %8.4f s %5.1f%%  %s\n", top[i].first, 100.0 * top[i].first / all, top[i].second.c_str());
  }
  return r;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

int usage() {
  std::fprintf(stderr,
               "usage: step_bench --family flux|sd35|pixart|ltx|wan [--configs tiny,mid,wide] "
               "[--precisions fp32,bf16] [--iters N] [--threads T] [--profile] [--gemms] [--plugins DIR] [--work DIR]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.plugins = fs::path(YETO_STAGE_DIR) / "plugins";
  o.work = fs::temp_directory_path() / ("yeto-step-bench-" + std::to_string(::getpid()));
  std::string config_list = "tiny,mid,wide", precisions = "fp32,bf16";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--profile") o.profile = true;
    else if (a == "--gemms") o.gemms = true;
    else if (a == "--family" && has_value) o.family = argv[++i];
    else if (a == "--iters" && has_value) o.iters = std::atoi(argv[++i]);
    else if (a == "--threads" && has_value) o.threads = std::atoi(argv[++i]);
    else if (a == "--configs" && has_value) config_list = argv[++i];
    else if (a == "--precisions" && has_value) precisions = argv[++i];
    else if (a == "--plugins" && has_value) o.plugins = argv[++i];
    else if (a == "--work" && has_value) o.work = argv[++i];
    else return usage();
  }
  const auto family = configs().find(o.family);
  if (family == configs().end()) {
    std::fprintf(stderr, "step_bench: --family must be one of flux, sd35, pixart, ltx, wan (got '%s')\n",
                 o.family.c_str());
    return usage();
  }
  if (o.iters < 1) {
    std::fprintf(stderr, "step_bench: --iters must be at least 1\n");
    return 2;
  }
  std::vector<const Setup*> setups;
  for (const auto& name : split(config_list)) {
    const auto it = std::find_if(family->second.begin(), family->second.end(),
                                 [&](const Setup& s) { return s.name == name; });
    if (it == family->second.end()) {
      std::fprintf(stderr, "step_bench: no config '%s' (tiny, mid, wide)\n", name.c_str());
      return 2;
    }
    setups.push_back(&*it);
  }
  const auto precision_list = split(precisions);
  for (const auto& p : precision_list)
    if (p != "fp32" && p != "bf16") {
      std::fprintf(stderr, "step_bench: precision '%s' (fp32, bf16)\n", p.c_str());
      return 2;
    }
  spdlog::set_level(spdlog::level::warn);
  const auto blas = yeto::runtime::select_blas_kernels();
  yeto::runtime::configure_threads(o.threads);
  try {
    const auto fp = yeto::initmodel::family_presets(yeto::config::Config::resolve(std::nullopt, overrides(o)), o.family);
    std::printf("%s LoRA training step on CPU (plugin %s %s): %d thread(s), best of %d step(s), BLAS %s kernels%s\n",
                o.family.c_str(), fp.plugin.c_str(), fp.version.c_str(), at::get_num_threads(), o.iters,
                blas.active.empty() ? "(not OpenBLAS)" : blas.active.c_str(),
                blas.changed ? (" (library picked " + blas.detected + ")").c_str() : "");
    for (const Setup* s : setups) {
      const fs::path repo = write_repository(o, fp, *s);
      double fp32_step = 0;
      bool header = false;
      for (const auto& p : precision_list) {
        const auto r = run(o, repo, *s, p);
        if (!header) {
          std::printf("%s: preset %s, %lld x %lld px%s, batch %lld, r %lld; %s\n", s->name.c_str(), s->preset.c_str(),
                      static_cast<long long>(s->width), static_cast<long long>(s->height),
                      s->frames > 0 ? (", " + std::to_string(s->frames) + " frames").c_str() : "",
                      static_cast<long long>(s->batch), static_cast<long long>(s->rank), r.tokens.c_str());
          std::printf("%-5s %-4s %9s %7s %7s %7s %7s %7s %8s %8s %8s %7s\n", "cfg", "prec", "samples/s", "step s",
                      "data", "fwd", "bwd", "opt", "GFLOP", "GFLOP/s", "roof/s", "frac");
          header = true;
        }
        const double gemm_time = r.fwd + r.bwd;
        std::printf("%-5s %-4s %9.2f %7.4f %7.4f %7.4f %7.4f %7.4f %8.3f %8.1f %8.1f %7.2f", s->name.c_str(),
                    p.c_str(), static_cast<double>(s->batch) / r.step, r.step, r.data, r.fwd, r.bwd, r.opt,
                    r.gemm_flops / 1e9, r.gemm_flops / 1e9 / gemm_time, r.gemm_flops / 1e9 / r.roofline,
                    r.roofline / gemm_time);
        if (p == "fp32") fp32_step = r.step;
        if (p == "bf16" && fp32_step > 0) std::printf("  bf16/fp32 speed %.2fx", fp32_step / r.step);
        std::printf("  loss %.5f\n", r.first_loss);
        std::fflush(stdout);
      }
      fs::remove_all(repo);
    }
    fs::remove_all(o.work);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_bench: %s\n", e.what());
    std::error_code ec;
    fs::remove_all(o.work, ec);
    return 1;
  }
  std::printf("GFLOP: the GEMMs of forward+backward; GFLOP/s over fwd+bwd; roof/s: the same GEMMs replayed as plain\n"
              "LibTorch calls; frac = replay time / (fwd+bwd) time.\n");
  return 0;
}
