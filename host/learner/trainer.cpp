#include "learner/trainer.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <sys/resource.h>
#if defined(YETO_HAVE_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/metrics.hpp"
#include "data/image.hpp"
#include "data/loader.hpp"
#include "data/manifest.hpp"
#include "data/options.hpp"
#include "data/sampler.hpp"
#include "data/source.hpp"
#include "data/torch/batch.hpp"
#include "island/collectives.hpp"
#include "io/provenance.hpp"
#include "io/tensors.hpp"
#include "learner/adamw.hpp"
#include "learner/checkpoint.hpp"
#include "learner/loss.hpp"
#include "learner/micro_batch.hpp"
#include "learner/outer_sync.hpp"
#include "learner/routing.hpp"
#include "learner/run_control.hpp"
#include "learner/settings.hpp"
#include "learner/timesteps.hpp"
#include "plugin/host_api.hpp"
#include "schedulers/scheduler.hpp"

namespace yeto::learner {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// The CUDA caching allocator's peak of allocated bytes on the current device since the process
// started, in MiB; < 0 in a build without CUDA or on a machine without a GPU.
double cuda_peak_mb() {
#if defined(YETO_HAVE_CUDA)
  if (c10::cuda::device_count() == 0) return -1;
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto stats = alloc::getDeviceStats(c10::cuda::current_device());
  return static_cast<double>(stats.allocated_bytes[static_cast<std::size_t>(alloc::StatType::AGGREGATE)].peak) /
         1048576.0;
#else
  return -1;
#endif
}

std::string eta_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

// The rows one run trains on and validates with, read once.
struct RunData {
  data::DataOptions options;
  data::Manifest train;
  std::vector<std::size_t> train_rows;  // indices into train.rows
  std::optional<data::Manifest> val_manifest;  // validation.data, when set
  std::vector<std::size_t> val_rows;           // indices into (val_manifest or train).rows
  std::map<std::string, std::string> manifest_bad_rows;  // location -> reason
  const data::Manifest& val_source() const { return val_manifest ? *val_manifest : train; }
};

void report_manifest_errors(const data::Manifest& m, data::BadRowPolicy policy,
                            std::map<std::string, std::string>& counted) {
  if (m.errors.empty()) return;
  if (policy == data::BadRowPolicy::error) {
    std::string msg = std::to_string(m.errors.size()) + " unusable row(s) in " + m.source.manifest.string() + ":";
    for (std::size_t i = 0; i < m.errors.size() && i < 20; ++i) msg += "\n  " + m.errors[i].str();
    if (m.errors.size() > 20) msg += "\n  ... and " + std::to_string(m.errors.size() - 20) + " more";
    msg += "\nfix or remove them, or set data.on_bad_row = \"skip\" to train without them";
    throw Error(msg, ExitCode::bad_input);
  }
  for (const auto& e : m.errors) {
    spdlog::warn("skipping bad row: {}", e.str());
    const auto text = e.str();
    const auto where = text.substr(0, text.find(": "));
    counted.emplace(where, text.size() > where.size() + 2 ? text.substr(where.size() + 2) : text);
  }
}

RunData read_run_data(const config::Config& cfg, const Settings& s, const RunOptions& run) {
  RunData d;
  d.options = data::data_options(cfg);
  if (!run.inputs.empty()) {
    data::apply_row_inputs(d.options, run.inputs, run.inputs_from);
    if (d.options.audio.enabled)
      spdlog::info("data: {} takes audio: each video row's sound at {} Hz, {} channel(s), cut to its sampled frames",
                   run.inputs_from, d.options.audio.sample_rate, d.options.audio.channels);
  }
  if (d.options.source.empty()) throw UsageError("data.path: no training data given (set data.path or --data)");
  d.train = data::read_manifest(data::resolve_source(d.options), d.options);
  report_manifest_errors(d.train, d.options.on_bad_row, d.manifest_bad_rows);
  std::vector<std::size_t> all(d.train.rows.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (auto vopt = data::validation_data_options(cfg)) {
    d.val_manifest = data::read_manifest(data::resolve_source(*vopt), *vopt);
    report_manifest_errors(*d.val_manifest, d.options.on_bad_row, d.manifest_bad_rows);
    d.train_rows = all;
    for (std::size_t i = 0; i < d.val_manifest->rows.size(); ++i) d.val_rows.push_back(i);
  } else if (s.validation_split > 0.0) {
    // A seeded, order-independent hold-out: the same rows on every rank and restart.
    std::vector<std::size_t> order = all;
    data::SeededStream stream(s.seed, 0x76616c /* "val" */);
    stream.shuffle(order);
    auto n_val = static_cast<std::size_t>(std::llround(s.validation_split * static_cast<double>(order.size())));
    n_val = std::clamp<std::size_t>(n_val, order.empty() ? 0 : 1, order.size() > 1 ? order.size() - 1 : 0);
    d.val_rows.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_val));
    std::sort(d.val_rows.begin(), d.val_rows.end());
    std::vector<bool> held(all.size(), false);
    for (auto r : d.val_rows) held[r] = true;
    for (auto r : all)
      if (!held[r]) d.train_rows.push_back(r);
  } else {
    d.train_rows = all;
  }
  if (d.train_rows.empty())
    throw Error("no usable training rows in " + d.train.source.manifest.string(), ExitCode::bad_input);
  if (static_cast<std::int64_t>(d.val_rows.size()) > s.validation_max_rows)
    d.val_rows.resize(static_cast<std::size_t>(s.validation_max_rows));
  return d;
}

std::string stream_name(const char* what, std::int64_t step, std::int64_t micro) {
  return std::string(what) + ":" + std::to_string(step) + ":" + std::to_string(micro);
}

// One training run, in phases: setup (data, trainables, optimizer), the micro batch choice,
// resume, start (outputs, held-out batches, the outer sync, the first evaluation), then one
// optimizer step at a time (train_step, report, poll_control), and finish. Every rank of an
// island runs the same phases through the same collectives; for one rank they do nothing.
class Loop {
 public:
  Loop(TrainModel& model, const config::Config& cfg, const RunOptions& options, OuterSync* sync)
      : model_(model), cfg_(cfg), opt_(options), sync_(sync), s_(read_settings(cfg)),
        ranks_(options.ranks ? *options.ranks : single_rank_), lead_(ranks_.rank() == 0),
        sharded_(cfg.get_string("train.shard") == "fsdp" && ranks_.world_size() > 1) {}

  RunResult run(const std::function<void(io::Provenance&)>& record_provenance);

 private:
  // What one optimizer step measured.
  struct StepStats {
    std::int64_t step = 0;
    double loss = 0, lr = 0, grad_norm = 0;
    std::int64_t samples = 0, skipped_now = 0;
    double t_data = 0, t_fwd = 0, t_bwd = 0, t_opt = 0, t_step = 0;
    nlohmann::json model_metrics = nlohmann::json::object();  // a full-step model's, summed over micro batches
  };

  // The phases of run().
  void setup();
  void choose_micro_batch_size();
  bool resume();  // true when a checkpoint was loaded
  void start(const std::function<void(io::Provenance&)>& record_provenance, bool resumed);
  StepStats train_step();
  // Records and prints the step; evaluates when due or at the end (`end`).
  void report(const StepStats& st, bool end);
  // Polls run control (every rank takes the strongest request) and checkpoints when asked or
  // due; true when the run stops here.
  bool poll_control(std::int64_t step, bool last, bool sync_cut);
  void finish();

  std::uint64_t stream(const std::string& name) const {
    return plugin::stream_seed(s_.seed, opt_.logical_rank, name);
  }
  data::Sample decode(const data::Manifest& m, std::size_t row) const {
    return data::decode_row(m.rows.at(row), row, data_.options);
  }
  // Latents and conditioning of one collated batch (no gradients: the encoders are frozen).
  NamedTensors encode(const data::TensorBatch& b, bool sample, std::uint64_t latent_seed, at::Tensor& latents);
  // The weighted loss of one batch with timesteps / noise from `gen`.
  at::Tensor batch_loss(const at::Tensor& latents, const NamedTensors& cond, at::Generator& gen);
  // A full-step model's loss of one collated batch (computes_loss): its rows, each with a seed
  // from stream `<seed_name>:<i>`, and its tensors; the model's metrics are added into `metrics`.
  at::Tensor model_loss(const data::TensorBatch& b, bool training, const std::string& seed_name,
                        nlohmann::json& metrics);
  // The held-out loss (NaN without held-out rows) and, with validation.draws > 1, its standard
  // error over the island's draws (NaN otherwise).
  struct Evaluation {
    double loss = std::nan("");
    double std_error = std::nan("");
  };
  Evaluation evaluate();
  // Adds "<key>" and, where known, "<key>_stderr" to a metrics record.
  static void record_evaluation(nlohmann::json& rec, const std::string& key, const Evaluation& e);
  void decode_validation_batches();
  bool next_micro_batch(data::TensorBatch& out, std::int64_t& skipped_now);
  void note_skipped(const data::Manifest& m, std::size_t row, const std::string& reason, std::int64_t& skipped_now);
  void open_epoch();
  void write_outputs_start(const std::function<void(io::Provenance&)>& record_provenance);
  void checkpoint();
  void truncate_metrics(std::int64_t after_step);
  // Validation renders: every validation.prompts generated with the weights now trained, into
  // RUN_DIR/samples/<step-N | final>/p<i>.png, samples/index.jsonl and TensorBoard images.
  void render(std::int64_t step, bool final);
  // Every rank's data position into state_.rank_positions (a collective).
  void gather_positions();

  TrainModel& model_;
  const config::Config& cfg_;
  RunOptions opt_;
  OuterSync* sync_;
  Settings s_;
  island::SingleRank single_rank_;
  island::Collectives& ranks_;  // the island's ranks, or single_rank_
  bool lead_;                   // island rank 0: the only writer of RUN_DIR
  // train.shard = "fsdp" over several ranks: every forward of the denoiser is a collective (its
  // blocks gather their weights), so every rank runs the same forwards in the same order
  // (probes, validation renders).
  bool sharded_;
  RunData data_;
  NamedTensors trainable_;
  std::int64_t n_params_ = 0;
  std::unique_ptr<AdamW> adam_;
  TrainState state_;
  std::int64_t micro_ = 1;
  std::int64_t accumulation_ = 1;
  std::unique_ptr<data::Loader> loader_;
  std::vector<data::TensorBatch> val_batches_;
  // Set by start():
  std::optional<RunMetrics> metrics_;  // island rank 0 only
  std::optional<RunControl> control_;
  Clock::time_point t_run_;
  std::int64_t start_step_ = 0, start_samples_ = 0;
  // Carried across steps:
  std::int64_t since_checkpoint_ = 0;
  RunResult result_;
  bool renders_ = false;  // island 0's rank 0 renders validation.prompts (fsdp: its peers generate too)
  std::unique_ptr<JsonlWriter> render_index_;
};

NamedTensors Loop::encode(const data::TensorBatch& b, bool sample, std::uint64_t latent_seed, at::Tensor& latents) {
  at::NoGradGuard no_grad;
  NamedTensors cond;
  if (b.pixel_values.defined()) {
    latents = model_.encode_media(b.pixel_values, sample, latent_seed).to(at::kFloat);
  } else {
    auto it = b.tensors.find("latents");
    if (it == b.tensors.end())
      throw Error("row " + std::to_string(b.rows.empty() ? 0 : b.rows[0]) + ": neither media nor cached latents",
                  ExitCode::bad_input);
    latents = it->second.to(at::kFloat);
  }
  NamedTensors extra;
  for (const auto& [name, t] : b.tensors)
    if (name != "latents") extra.emplace_back(name, t);
  const bool have_prompts =
      std::any_of(b.prompts.begin(), b.prompts.end(), [](const std::string& p) { return !p.empty(); });
  const bool cached_text = std::any_of(extra.begin(), extra.end(), [](const auto& e) { return e.first == "prompt_embeds"; });
  if (have_prompts && !cached_text) {
    cond = model_.encode_conditioning(b.prompts, extra);
  } else {
    cond = extra;
  }
  for (auto& [name, t] : cond) t = t.detach();
  return cond;
}

at::Tensor Loop::batch_loss(const at::Tensor& latents, const NamedTensors& cond, at::Generator& gen) {
  return diffusion_loss(model_, s_, latents, cond, gen);
}

at::Tensor Loop::model_loss(const data::TensorBatch& b, bool training, const std::string& seed_name,
                            nlohmann::json& metrics) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < b.rows.size(); ++i)
    rows.push_back({{"row", b.rows[i]},
                    {"prompt", i < b.prompts.size() ? b.prompts[i] : std::string()},
                    {"seed", stream(seed_name + ":" + std::to_string(i))},
                    {"training", training}});
  NamedTensors tensors;
  if (b.pixel_values.defined()) tensors.emplace_back("pixel_values", b.pixel_values);
  for (const auto& [name, t] : b.tensors) tensors.emplace_back(name, t);
  nlohmann::json m;
  auto loss = model_.loss_step(rows, tensors, m);
  if (!metrics.is_object()) metrics = nlohmann::json::object();
  for (const auto& [name, v] : m.items()) metrics[name] = metrics.value(name, 0.0) + v.get<double>();
  return loss;
}

Loop::Evaluation Loop::evaluate() {
  Evaluation e;
  if (val_batches_.empty()) return e;
  at::NoGradGuard no_grad;
  auto default_gen = at::detail::getDefaultCPUGenerator();
  const auto saved = default_gen.get_state();
  const std::int64_t draws = std::max<std::int64_t>(1, s_.validation_draws);
  // Each draw's loss over the rows. A batch's latents and conditioning do not depend on the draw
  // (no sampling): encoded once, then every draw's timesteps and noise.
  std::vector<double> total(static_cast<std::size_t>(draws), 0.0);
  std::int64_t count = 0;
  for (std::size_t i = 0; i < val_batches_.size(); ++i) {
    // Fixed timesteps, noise and latent samples per evaluation and draw: val_loss tracks the
    // model (draw 0 is the single draw of validation.draws = 1).
    const auto idx = static_cast<std::int64_t>(i);
    if (model_.computes_loss()) {
      const auto rows = static_cast<std::int64_t>(val_batches_[i].rows.size());
      for (std::int64_t d = 0; d < draws; ++d) {
        at::manual_seed(stream(stream_name("validation-torch", d, idx)));
        nlohmann::json unused;
        const auto loss = model_loss(val_batches_[i], false, stream_name("validation", d, idx), unused);
        total[static_cast<std::size_t>(d)] += loss.item<double>() * static_cast<double>(rows);
      }
      count += rows;
      continue;
    }
    at::manual_seed(stream(stream_name("validation-torch", 0, idx)));
    at::Tensor latents;
    const auto cond = encode(val_batches_[i], false, stream(stream_name("validation-latent", 0, idx)), latents);
    for (std::int64_t d = 0; d < draws; ++d) {
      if (d > 0) at::manual_seed(stream(stream_name("validation-torch", d, idx)));
      auto gen = make_generator(stream(stream_name("validation", d, idx)));
      const auto loss = batch_loss(latents, cond, gen);
      total[static_cast<std::size_t>(d)] += loss.item<double>() * static_cast<double>(latents.size(0));
    }
    count += latents.size(0);
  }
  double sum = 0.0, sum_sq = 0.0;  // over this rank's draws
  for (const double t : total) {
    const double v = t / static_cast<double>(count);
    sum += v;
    sum_sq += v * v;
  }
  default_gen.set_state(saved);
  const double n_rank = static_cast<double>(draws);
  // Every rank evaluates the same rows with its own noise streams; the island reports the mean
  // over its ranks' draws (all of equal count), and their standard error.
  e.loss = island::mean_of(ranks_, sum / n_rank);
  if (draws > 1) {
    const double mean_sq = island::mean_of(ranks_, sum_sq / n_rank);
    const double n = n_rank * static_cast<double>(ranks_.world_size());
    const double var = std::max(0.0, mean_sq - e.loss * e.loss) * n / (n - 1);
    e.std_error = std::sqrt(var / n);
  }
  return e;
}

void Loop::record_evaluation(nlohmann::json& rec, const std::string& key, const Evaluation& e) {
  rec[key] = e.loss;
  if (std::isfinite(e.std_error)) rec[key + "_stderr"] = e.std_error;
}

void Loop::gather_positions() {
  const int w = ranks_.world_size();
  if (w < 2) return;  // one rank's position is the checkpoint's own epoch / batch_in_epoch
  std::vector<double> v(static_cast<std::size_t>(2 * w), 0.0);
  v[static_cast<std::size_t>(2 * ranks_.rank())] = static_cast<double>(state_.epoch);
  v[static_cast<std::size_t>(2 * ranks_.rank() + 1)] = static_cast<double>(state_.batch_in_epoch);
  v = island::allreduce_values(ranks_, std::move(v));
  state_.rank_positions.clear();
  for (int r = 0; r < w; ++r)
    state_.rank_positions.push_back({static_cast<std::int64_t>(v[static_cast<std::size_t>(2 * r)]),
                                     static_cast<std::int64_t>(v[static_cast<std::size_t>(2 * r + 1)])});
}

void Loop::open_epoch() {
  std::vector<data::ShapeKey> shapes;
  shapes.reserve(data_.train_rows.size());
  for (auto r : data_.train_rows) shapes.push_back(data::shape_of(data_.train.rows[r], data_.options));
  data::SamplerOptions so;
  so.seed = s_.seed;
  so.epoch = static_cast<std::uint64_t>(state_.epoch);
  so.rank = opt_.island;
  so.world = opt_.islands;
  so.sub_rank = ranks_.rank();
  so.sub_world = ranks_.world_size();
  so.batch_size = micro_;
  so.bucket_by_shape = data_.options.bucket_by_shape;
  auto plan = data::plan_batches(shapes, so);
  if (plan.empty())
    throw Error("rank " + std::to_string(opt_.logical_rank) + " of " + std::to_string(opt_.world) +
                    " has no training rows; add rows or use fewer ranks",
                ExitCode::bad_input);
  if (state_.batch_in_epoch >= static_cast<std::int64_t>(plan.size())) {
    ++state_.epoch;
    state_.batch_in_epoch = 0;
    open_epoch();
    return;
  }
  data::BatchPlan rest(plan.begin() + state_.batch_in_epoch, plan.end());
  for (auto& batch : rest)
    for (auto& r : batch) r = data_.train_rows[r];
  data::LoaderOptions lo;
  lo.workers = data_.options.workers;
  lo.prefetch = data_.options.prefetch;
  lo.on_bad_row = data_.options.on_bad_row;
  lo.keep_empty_batches = true;  // an all-bad batch still advances the data position
  loader_.reset();
  loader_ = std::make_unique<data::Loader>(std::move(rest), [this](std::size_t row) { return decode(data_.train, row); },
                                           lo);
}

bool Loop::next_micro_batch(data::TensorBatch& out, std::int64_t& skipped_now) {
  for (;;) {
    if (!loader_) open_epoch();
    auto batch = loader_->next();
    if (!batch) {
      ++state_.epoch;
      state_.batch_in_epoch = 0;
      loader_.reset();
      continue;
    }
    ++state_.batch_in_epoch;
    for (const auto& sk : batch->skipped) note_skipped(data_.train, sk.row, sk.reason, skipped_now);
    if (batch->samples.empty()) continue;
    out = data::collate(batch->samples);
    return true;
  }
}

void Loop::note_skipped(const data::Manifest& m, std::size_t row, const std::string& reason,
                        std::int64_t& skipped_now) {
  const std::string where = m.rows.at(row).where();
  if (state_.skipped.count(where)) return;  // reported once, in the epoch it was first met
  std::string why = reason;
  if (why.rfind(where, 0) == 0 && why.size() > where.size() + 2) why = why.substr(where.size() + 2);
  spdlog::warn("skipping bad row: {}: {}", where, why);
  state_.skipped.emplace(where, why);
  state_.skipped_rows = static_cast<std::int64_t>(state_.skipped.size());
  ++skipped_now;
}

void Loop::truncate_metrics(std::int64_t after_step) {
  // metrics.jsonl and the validation renders' index drop what came after the checkpoint (and the
  // final renders, which the resumed run makes again), so nothing is listed twice.
  for (const fs::path& p : {opt_.run_dir / "metrics.jsonl", opt_.run_dir / "samples" / "index.jsonl"}) {
    std::error_code ec;
    if (!fs::exists(p, ec)) continue;
    std::istringstream in(read_file(p));
    std::string line, kept;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        const auto j = nlohmann::json::parse(line);
        if (j.value("step", std::int64_t{0}) > after_step || j.value("final", false)) continue;
      } catch (const nlohmann::json::exception&) {
        continue;  // a record torn by a crash
      }
      kept += line + "\n";
    }
    atomic_write(p, kept);
  }
}

void Loop::write_outputs_start(const std::function<void(io::Provenance&)>& record_provenance) {
  fs::create_directories(opt_.run_dir);
  // Temporaries of writes a kill interrupted (the run dir, checkpoints/, checkpoints/step-*/).
  if (const std::size_t n = remove_stale_temporaries(opt_.run_dir, 2))
    spdlog::info("removed {} temporary file(s) left by an interrupted write in {}", n, opt_.run_dir.string());
  atomic_write(opt_.run_dir / "config.toml", cfg_.to_toml(true));
  io::Provenance prov;
  prov.set_config(cfg_);
  if (record_provenance) record_provenance(prov);
  prov.set("learner", {{"model", model_.describe()},
                       {"logical_rank", opt_.logical_rank},
                       {"world", opt_.world},
                       {"island_ranks", ranks_.world_size()},
                       {"seed", s_.seed},
                       {"micro_batch_size", micro_},
                       {"gradient_accumulation", accumulation_},
                       {"trainable_tensors", trainable_.size()},
                       {"data", data_.train.source.manifest.string()}});
  prov.write(opt_.run_dir / "provenance.json");
}

void Loop::checkpoint() {
  gather_positions();  // every rank calls checkpoint() at the same step boundaries
  if (!lead_) return;
  const auto dir = save_checkpoint(opt_.run_dir, state_, trainable_, *adam_);
  spdlog::info("checkpoint: {}", dir.string());
}

RunResult Loop::run(const std::function<void(io::Provenance&)>& record_provenance) {
  setup();
  choose_micro_batch_size();
  const bool resumed = resume();
  start(record_provenance, resumed);
  while (state_.step < s_.max_steps) {
    const StepStats st = train_step();
    const bool last = st.step == s_.max_steps;
    // The syncer's budget cutoff is a normal end (terminal handshake and final save below),
    // not an interruption: like max_steps, it ends with an evaluation.
    const bool sync_cut = sync_ && sync_->stop_requested();
    report(st, last || sync_cut);
    if (poll_control(st.step, last, sync_cut)) break;
  }
  loader_.reset();
  finish();
  control_.reset();  // restores the signal handlers
  metrics_.reset();  // flushes metrics.jsonl and the event file
  return result_;
}

void Loop::setup() {
  if (opt_.run_dir.empty()) throw UsageError("train: --output RUN_DIR is required");
  data_ = read_run_data(cfg_, s_, opt_);
  state_.skipped = data_.manifest_bad_rows;
  state_.skipped_rows = static_cast<std::int64_t>(state_.skipped.size());
  state_.config_hash = cfg_.hash();
  trainable_ = model_.trainable();
  if (trainable_.empty()) throw Error(model_.describe() + " reports no trainable parameters");
  for (auto& [name, t] : trainable_) {
    // Mixed precision keeps float32 masters: the optimizer state, checkpoints and the syncer's
    // pseudo-gradients are float32 whatever the base computes in.
    if (t.scalar_type() != at::kFloat)
      throw Error(model_.describe() + ": trainable tensor '" + name + "' is " + std::string(c10::toString(t.scalar_type())) +
                  "; the learner needs float32 master weights (the plugin's prepare must keep trainable tensors "
                  "float32 under model.precision = \"" + cfg_.get_string("model.precision") + "\")",
                  ExitCode::failure);
    if (!t.requires_grad()) t.set_requires_grad(true);
    n_params_ += t.numel();
  }
  adam_ = std::make_unique<AdamW>(trainable_, s_.optimizer);
}

void Loop::choose_micro_batch_size() {
  if (s_.micro_batch_size) {
    micro_ = *s_.micro_batch_size;
    accumulation_ = s_.gradient_accumulation;
    return;
  }
  // Probed against the memory budget.
  ProbeRequest req;
  req.effective_batch = s_.gradient_accumulation;
  req.budget_mb = s_.memory_budget_mb;
  std::map<data::ShapeKey, std::vector<std::size_t>> by_shape;
  for (auto r : data_.train_rows) by_shape[data::shape_of(data_.train.rows[r], data_.options)].push_back(r);
  for (const auto& [shape, rows] : by_shape) {
    if (req.shapes.size() >= 8) break;
    req.shapes.push_back({shape.str(), rows});
  }
  auto probe = [&](const std::vector<std::size_t>& rows) {
    std::vector<data::Sample> samples;
    for (auto r : rows) samples.push_back(decode(data_.train, r));
    const auto b = data::collate(samples);
    at::Tensor loss;
    if (model_.computes_loss()) {
      nlohmann::json unused;
      loss = model_loss(b, true, "probe", unused);
    } else {
      at::Tensor latents;
      const auto cond = encode(b, true, stream("probe-latent"), latents);
      auto gen = make_generator(stream("probe"));
      loss = batch_loss(latents, cond, gen);
    }
    loss.backward();
    adam_->zero_grad();
  };
  // A size fits when it fits on every rank: the island's largest peak decides, so every rank
  // takes the same decisions and runs the same probes (under fsdp each is a collective).
  const auto peak = [&] { return island::allreduce_values(ranks_, {peak_rss_since_reset_mb()}, island::ReduceOp::max)[0]; };
  const auto decision = choose_micro_batch(req, probe, peak);
  // The island trains in lock-step: every rank takes rank 0's choice.
  const auto v = island::broadcast_values(ranks_, {static_cast<double>(decision.micro_batch_size),
                                                   static_cast<double>(decision.gradient_accumulation)});
  micro_ = static_cast<std::int64_t>(v[0]);
  accumulation_ = static_cast<std::int64_t>(v[1]);
  spdlog::info("micro_batch_size = auto: {}", decision.log);
}

bool Loop::resume() {
  if (!opt_.resume) return false;
  const auto candidates = resume_candidates(opt_.run_dir);
  if (candidates.latest.empty()) return false;  // no checkpoint was ever written
  const auto hash = state_.config_hash;
  // The newest checkpoint whose files are intact: a damaged one (a disk error, a torn copy)
  // falls back to the older one kept instead of ending the run.
  std::optional<fs::path> dir;
  std::string damage = candidates.dirs.empty() || candidates.dirs.front() != candidates.latest
                           ? candidates.latest.string() + " is missing"
                           : std::string();
  for (const auto& c : candidates.dirs) {
    try {
      state_ = load_checkpoint(c, trainable_, *adam_);
      dir = c;
      break;
    } catch (const CheckpointDamaged& e) {
      spdlog::warn("resume: {}", e.what());
      if (damage.empty()) damage = e.what();
    }
  }
  if (!dir)
    throw Error("resume: no intact checkpoint in " + (opt_.run_dir / "checkpoints").string() + " (" + damage +
                    "); remove " + (opt_.run_dir / "checkpoints" / "latest").string() + " to start over",
                ExitCode::bad_input);
  if (*dir != candidates.latest)
    spdlog::warn("resume: falling back to the older checkpoint {} (the newer one is damaged or missing)",
                 dir->string());
  if (state_.config_hash != hash)
    spdlog::warn("resuming {} written with a different configuration (hash {} vs {})", dir->string(),
                 state_.config_hash.substr(0, 12), hash.substr(0, 12));
  state_.config_hash = hash;
  const int world = ranks_.world_size();
  if (world > 1) {  // each rank continues at its own data position
    const auto r = static_cast<std::size_t>(ranks_.rank());
    if (state_.rank_positions.size() == static_cast<std::size_t>(world)) {
      state_.epoch = state_.rank_positions[r][0];
      state_.batch_in_epoch = state_.rank_positions[r][1];
    } else {
      spdlog::warn("{} was written by an island of {} rank(s), this one has {}: every rank resumes at rank 0's "
                   "data position",
                   dir->string(), std::max<std::size_t>(1, state_.rank_positions.size()), world);
    }
  }
  if (lead_) truncate_metrics(state_.step);
  spdlog::info("resumed from {} at step {} (epoch {}, micro batch {})", dir->string(), state_.step, state_.epoch,
               state_.batch_in_epoch);
  return true;
}

void Loop::start(const std::function<void(io::Provenance&)>& record_provenance, bool resumed) {
  // Ranks start identical: the plugin may initialise LoRA from a per-rank stream.
  island::broadcast_tensors(ranks_, trainable_, 0);
  if (lead_) {
    write_outputs_start(record_provenance);
    metrics_.emplace(opt_.run_dir, s_.tensorboard);
    if (resumed) metrics_->restart_at(state_.step + 1);
  }
  decode_validation_batches();
  spdlog::info("training {}: {} trainable tensors ({} parameters), {} rows ({} held out), micro batch {} x {} "
               "accumulation, {} steps",
               model_.describe(), trainable_.size(), n_params_, data_.train_rows.size(), data_.val_rows.size(), micro_,
               accumulation_, s_.max_steps);
  if (sync_) sync_->start(trainable_);
  control_.emplace(opt_.run_dir, true);
  if (!s_.validation_prompts.empty() && lead_ && opt_.logical_rank == 0) {
    if (s_.sample_every <= 0)
      spdlog::info("validation.prompts are rendered only with validation.sample_every > 0");
    else if (!model_.can_generate())
      spdlog::warn("validation.prompts: {} does not generate; no validation renders", model_.describe());
    else
      renders_ = true;
  }
  // fsdp: the island's other ranks generate with it (their blocks' gathers), writing nothing.
  if (sharded_) renders_ = island::rank0_decides(ranks_, renders_);
  if (!resumed || state_.step == 0) {
    const Evaluation e = evaluate();
    if (const double v = e.loss; std::isfinite(v)) {
      result_.first_val_loss = result_.last_val_loss = v;
      nlohmann::json rec = {{"step", state_.step}};
      record_evaluation(rec, "val_loss", e);
      if (metrics_) metrics_->record(rec);
      spdlog::info("step {} val_loss {:.6f}", state_.step, v);
    }
    if (renders_) render(state_.step, false);  // what the model makes before training
  }
  t_run_ = Clock::now();
  start_step_ = state_.step;
  start_samples_ = state_.samples;
}

// Held-out batches, decoded once (fixed order).
void Loop::render(std::int64_t step, bool final) {
  const auto t0 = Clock::now();
  const std::string dir_name = final ? std::string("final") : fmt::format("step-{:08d}", step);
  const fs::path dir = opt_.run_dir / "samples" / dir_name;
  try {
    if (!render_index_ && lead_) render_index_ = std::make_unique<JsonlWriter>(opt_.run_dir / "samples" / "index.jsonl");
    for (std::size_t i = 0; i < s_.validation_prompts.size(); ++i) {
      const std::uint64_t seed = static_cast<std::uint64_t>(s_.sample_seed) + i;
      nlohmann::json request = {{"prompts", {s_.validation_prompts[i]}}, {"seed", seed},
                                {"steps", s_.sample_steps},           {"guidance", s_.sample_guidance},
                                {"height", s_.sample_height},         {"width", s_.sample_width}};
      // The text the model trains on: a render at another length conditions it on padding it
      // never saw (a Flux run at 32 tokens rendered at 512 drew none of its learned shapes).
      if (s_.sample_max_sequence_length > 0) request["max_sequence_length"] = s_.sample_max_sequence_length;
      const at::Tensor media = data::generated_media(model_.generate(request), "validation render");
      if (!lead_) continue;  // an fsdp peer: it took part in the gathers
      // An image, or a video's first frame.
      const std::vector<std::uint8_t> rgb = data::media_to_rgb8(media.dim() == 5 ? media[0].select(1, 0) : media[0]);
      const int height = static_cast<int>(media.size(-2)), width = static_cast<int>(media.size(-1));
      const std::string png = data::encode_png(rgb, height, width);
      const std::string file = "p" + std::to_string(i) + ".png";
      atomic_write(dir / file, png);
      nlohmann::json rec = {{"step", step},  {"prompt_index", i}, {"prompt", s_.validation_prompts[i]},
                            {"seed", seed},  {"path", "samples/" + dir_name + "/" + file},
                            {"width", width}, {"height", height}, {"final", final}};
      if (media.dim() == 5) rec["frames"] = media.size(2);
      render_index_->write(rec);
      if (metrics_) metrics_->image("samples/p" + std::to_string(i), step, png, height, width);
    }
  } catch (const std::exception& e) {
    // A render is a view of the run, not part of it: training goes on without them.
    spdlog::warn("validation render at step {} failed: {}; no more validation renders in this run", step, e.what());
    renders_ = false;
  }
  if (sharded_) renders_ = island::rank0_decides(ranks_, renders_);
  if (!renders_ || !lead_) return;
  spdlog::info("validation renders {}: {} prompt(s) in {:.1f} s -> {}", final ? "of the final weights" : fmt::format("at step {}", step),
               s_.validation_prompts.size(), seconds_since(t0), dir.string());
}

void Loop::decode_validation_batches() {
  const auto& m = data_.val_source();
  for (std::size_t i = 0; i < data_.val_rows.size(); i += static_cast<std::size_t>(micro_)) {
    std::vector<data::Sample> samples;
    for (std::size_t j = i; j < std::min(data_.val_rows.size(), i + static_cast<std::size_t>(micro_)); ++j) {
      try {
        samples.push_back(decode(m, data_.val_rows[j]));
      } catch (const Error& e) {
        if (data_.options.on_bad_row == data::BadRowPolicy::error) throw;
        std::int64_t ignored = 0;
        note_skipped(m, data_.val_rows[j], e.what(), ignored);
      }
    }
    if (!samples.empty()) val_batches_.push_back(data::collate(samples));
  }
  if (val_batches_.empty()) spdlog::info("no held-out rows (validation.data / validation.split): no val_loss");
}

Loop::StepStats Loop::train_step() {
  StepStats st;
  const auto t_step = Clock::now();
  st.step = state_.step + 1;
  double loss_sum = 0;
  for (std::int64_t m = 0; m < accumulation_; ++m) {
    auto t0 = Clock::now();
    data::TensorBatch batch;
    next_micro_batch(batch, st.skipped_now);
    at::manual_seed(stream(stream_name("torch", st.step, m)));  // plugin-side randomness (dropout)
    at::Tensor loss;
    std::int64_t rows = 0;
    if (model_.computes_loss()) {
      st.t_data += seconds_since(t0);
      t0 = Clock::now();
      loss = model_loss(batch, true, stream_name("noise", st.step, m), st.model_metrics);
      rows = static_cast<std::int64_t>(batch.rows.size());
    } else {
      at::Tensor latents;
      const auto cond = encode(batch, true, stream(stream_name("latent", st.step, m)), latents);
      st.t_data += seconds_since(t0);
      t0 = Clock::now();
      auto gen = make_generator(stream(stream_name("noise", st.step, m)));
      loss = batch_loss(latents, cond, gen);
      rows = latents.size(0);
    }
    st.t_fwd += seconds_since(t0);
    t0 = Clock::now();
    (loss / static_cast<double>(accumulation_)).backward();
    st.t_bwd += seconds_since(t0);
    loss_sum += loss.item<double>();
    st.samples += rows;
  }
  const auto t0 = Clock::now();
  // ddp: average the LoRA gradients, and sum the island's loss and samples, so every rank
  // takes the same optimizer step and reports the same numbers.
  island::average_gradients(ranks_, trainable_);
  const auto v = island::allreduce_values(ranks_, {loss_sum, static_cast<double>(st.samples)});
  loss_sum = v[0] / static_cast<double>(ranks_.world_size());
  st.samples = static_cast<std::int64_t>(v[1]);
  st.grad_norm = clip_grad_norm(trainable_, s_.max_grad_norm);
  st.lr = learning_rate_at(s_.optimizer, st.step);
  adam_->step(st.lr);
  adam_->zero_grad();
  st.t_opt = seconds_since(t0);
  state_.step = st.step;
  state_.samples += st.samples;
  if (sync_) sync_->after_step(st.step, state_.samples, trainable_);

  st.loss = loss_sum / static_cast<double>(accumulation_);
  if (!std::isfinite(st.loss))
    throw Error("step " + std::to_string(st.step) + ": the loss is " + std::to_string(st.loss) +
                "; lower optimizer.learning_rate or check the data");
  st.t_step = seconds_since(t_step);
  return st;
}

void Loop::report(const StepStats& st, bool end) {
  nlohmann::json rec = {{"step", st.step},
                        {"loss", st.loss},
                        {"lr", st.lr},
                        {"grad_norm", st.grad_norm},
                        {"samples", state_.samples},
                        {"epoch", state_.epoch},
                        {"samples_per_s", static_cast<double>(st.samples) / std::max(st.t_step, 1e-9)},
                        {"time_data_s", st.t_data},
                        {"time_forward_s", st.t_fwd},
                        {"time_backward_s", st.t_bwd},
                        {"time_optimizer_s", st.t_opt},
                        {"peak_rss_mb", peak_rss_mb()}};
  if (const double cuda = cuda_peak_mb(); cuda >= 0) rec["cuda_peak_mb"] = cuda;
  if (st.skipped_now > 0) rec["skipped_rows"] = state_.skipped_rows;
  // A full-step model's own metrics (this rank's, averaged over the step's micro batches).
  for (const auto& [name, v] : st.model_metrics.items())
    rec["model/" + name] = v.get<double>() / static_cast<double>(accumulation_);
  if ((s_.validation_every > 0 && st.step % s_.validation_every == 0) || end) {
    const Evaluation e = evaluate();
    if (const double v = e.loss; std::isfinite(v)) {
      record_evaluation(rec, "val_loss", e);
      if (!result_.first_val_loss) result_.first_val_loss = v;
      result_.last_val_loss = v;
    }
  }
  if (metrics_) metrics_->record(rec);
  result_.last_loss = st.loss;
  if (renders_ && !end && st.step % s_.sample_every == 0) render(st.step, false);

  if (opt_.console && lead_) {
    const double elapsed = seconds_since(t_run_);
    const double done = static_cast<double>(st.step - start_step_);
    const double rate = done / std::max(elapsed, 1e-9);
    const std::int64_t every = std::max<std::int64_t>(1, s_.max_steps / 20);
    if (st.step % every == 0 || end || st.step == start_step_ + 1)
      spdlog::info("step {}/{} loss {:.5f}{} lr {:.3g} |g| {:.3g} {:.2f} steps/s {:.1f} samples/s ETA {}", st.step,
                   s_.max_steps, st.loss,
                   rec.contains("val_loss") ? fmt::format(" val_loss {:.5f}", rec["val_loss"].get<double>()) : "",
                   st.lr, st.grad_norm, rate,
                   static_cast<double>(state_.samples - start_samples_) / std::max(elapsed, 1e-9),
                   eta_text(static_cast<double>(s_.max_steps - st.step) / std::max(rate, 1e-9)));
  }
}

bool Loop::poll_control(std::int64_t step, bool last, bool sync_cut) {
  ++since_checkpoint_;
  // The strongest request of any rank, on every rank.
  const auto req = static_cast<Request>(static_cast<int>(island::allreduce_values(
      ranks_, {static_cast<double>(static_cast<int>(control_->poll()))}, island::ReduceOp::max)[0]));
  const bool stop = req == Request::save_quit;
  if (!last && !sync_cut &&
      (stop || req == Request::save || (s_.checkpoint_every > 0 && step % s_.checkpoint_every == 0))) {
    checkpoint();
    since_checkpoint_ = 0;
  }
  if (sync_cut && !stop) {
    spdlog::info("the syncer announced the budget cutoff after step {}", step);
    return true;
  }
  if (stop && !last) {
    if (control_->signal_received() != 0)
      spdlog::warn("signal {}: checkpoint written at step {}, stopping", control_->signal_received(), step);
    else
      spdlog::info("stopping at step {} as asked; resume with the same command", step);
    result_.stopped_early = true;
  }
  return stop;
}

void Loop::finish() {
  if (!result_.stopped_early) {
    if (sync_) {
      if (!sync_->finish(trainable_)) {
        spdlog::warn("no final cut from the syncer; saving the local weights");
      } else if (!val_batches_.empty()) {
        // The run's result is the final cut: its held-out loss, next to the island's own above.
        const Evaluation e = evaluate();
        if (const double v = e.loss; std::isfinite(v)) {
          nlohmann::json rec = {{"step", state_.step}};
          record_evaluation(rec, "val_loss_final_cut", e);
          if (metrics_) metrics_->record(rec);
          spdlog::info("val_loss {:.6f} on the final cut", v);
          result_.last_val_loss = v;
        }
      }
    }
    if (renders_) render(state_.step, true);  // the weights the run ends on (after the final cut)
    if (island::rank0_decides(ranks_, since_checkpoint_ > 0 || state_.step == 0 ||
                                          (lead_ && !latest_checkpoint(opt_.run_dir))))
      checkpoint();
    if (lead_) {
      std::vector<std::pair<std::string, at::Tensor>> weights;
      for (const auto& [name, t] : trainable_) weights.emplace_back(name, t.detach());
      io::save_safetensors(opt_.run_dir / "lora.safetensors", weights,
                           {{"yeto.step", std::to_string(state_.step)}, {"yeto.tuning", s_.tuning}});
      spdlog::info("done: {} steps, adapter {}", state_.step, (opt_.run_dir / "lora.safetensors").string());
    }
  }
  if (state_.skipped_rows > 0) {
    spdlog::warn("skipped {} bad row(s) under data.on_bad_row = skip:", state_.skipped_rows);
    for (const auto& [where, why] : state_.skipped) spdlog::warn("  {}: {}", where, why);
  }
  for (const auto& [where, why] : state_.skipped) result_.bad_rows.push_back(where + ": " + why);
  result_.steps = state_.step;
  result_.skipped_rows = state_.skipped_rows;
}

}  // namespace

RunResult train(TrainModel& model, const config::Config& cfg, const RunOptions& options, OuterSync* sync,
                const std::function<void(io::Provenance&)>& record_provenance) {
  Loop loop(model, cfg, options, sync);
  return loop.run(record_provenance);
}

}  // namespace yeto::learner
