// `yeto-host launch plan|up|status|logs|down`: a run's syncer and islands on Slurm, SkyPilot
// or Kubernetes (fleet/fleet.hpp). Torch-free.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "app/memory_inventory.hpp"
#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "fleet/client.hpp"
#include "fleet/fleet.hpp"
#include "fleet/planner.hpp"
#include "fleet/record.hpp"
#include "sync/launch.hpp"

namespace yeto::app {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string self_path() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw Error("cannot find this program's path (/proc/self/exe)");
  std::string s(self, static_cast<std::size_t>(n));
  const std::string deleted = " (deleted)";
  if (s.size() > deleted.size() && s.ends_with(deleted)) s.resize(s.size() - deleted.size());
  return s;
}

fs::path local_path(const std::string& s, const fs::path& base) {
  if (s.empty()) return {};
  fs::path p(s);
  if (p.is_relative()) p = base / p;
  std::error_code ec;
  if (!fs::exists(p, ec)) return {};
  return fs::weakly_canonical(p);
}

fleet::Fleet build_fleet(CommandContext& ctx) {
  const config::Config& cfg = ctx.config();
  fleet::Fleet f;
  f.s = fleet::launch_settings_from_config(cfg);
  if (ctx.has("engine")) f.s.engine = fleet::parse_engine(ctx.value("engine"));
  f.run_dir = fs::absolute(cfg.get_path("run.output"));
  if (ctx.args().config_file) f.config_file = fs::absolute(*ctx.args().config_file);
  for (const auto& ov : ctx.args().overrides)
    if (!starts_with(ov.key, "launch.") && ov.key != "run.output" && ov.key != "sync.islands")
      f.sets.push_back(ov.key + "=" + ov.value);
  f.shard = cfg.get_string("train.shard");
  const std::string run_name = cfg.get_string("run.name");
  f.name = fleet::fleet_name(run_name.empty() ? f.run_dir.filename().string() : run_name);
  const auto gpus = ctx.has("gpu") ? ctx.values("gpu") : cfg.get_list("launch.islands");
  for (const auto& g : gpus) f.islands.push_back(fleet::parse_island_spec(g));
  if (f.s.host_bin.empty()) f.s.host_bin = f.s.engine == fleet::Engine::slurm ? self_path() : "yeto-host";
  // Relative data and model paths are relative to the working directory, as the run reads them.
  const fs::path base = fs::current_path();
  f.data_local = local_path(cfg.get_string("data.path"), base);
  f.model_local = local_path(cfg.get_string("model.id"), base);
  return f;
}

void print_plan(const fleet::Fleet& f, const std::vector<fleet::Manifest>& ms) {
  std::ostringstream o;
  o << "fleet " << f.name << " on " << fleet::engine_name(f.s.engine) << ": a syncer and " << f.islands.size()
    << (f.islands.size() == 1 ? " island" : " islands") << "\n";
  for (std::size_t i = 0; i < f.islands.size(); ++i) {
    const auto& s = f.islands[i];
    o << "  island-" << i << "  " << s.to_string() << "  (" << s.nodes << (s.nodes == 1 ? " node" : " nodes") << " x "
      << s.per_node << (s.cpu_only() ? " CPU ranks" : " GPUs") << " = " << s.ranks() << (s.ranks() == 1 ? " rank" : " ranks")
      << (s.ranks() > 1 ? std::string(", ") + (f.shard == "fsdp" ? "fsdp" : "ddp") : std::string()) << ")\n";
  }
  o << "manifests:\n";
  for (const auto& m : ms) o << "  " << m.role << ": " << m.path.string() << "\n";
  std::cout << o.str();
}

// The command as a user runs it by hand: the variables it reads are exported first, from
// where `launch up` takes them.
std::string command_text(const fleet::Fleet& f, const fleet::ClientCommand& c) {
  std::string s;
  for (const auto& v : c.env) {
    if (v == "YETO_RUN_SECRET")
      s += "export " + v + "=\"$(cat " + fleet::shell_quote((f.run_dir / "run.secret").string()) + ")\"; ";
    else if (v == "YETO_SYNCER")
      s += "export " + v + "=\"$(sky status --ip " + f.name + "-syncer):" +
           std::to_string(f.s.syncer_port > 0 ? f.s.syncer_port : 29400) + "\"; ";
    else
      s += "export " + v + "=...; ";
  }
  std::vector<std::string> q;
  for (const auto& a : c.argv) q.push_back(fleet::shell_quote(a));
  return s + join(q, " ");
}

double positive_number(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(v > 0) || !std::isfinite(v)) throw UsageError(what + " '" + text + "': expected a number > 0");
  return v;
}

// `launch plan --gpus TABLE`: island shapes sized by the memory model from the GPU table.
int launch_size(CommandContext& ctx) {
  const config::Config& cfg = ctx.config();
  const auto gpus = fleet::read_gpu_table(ctx.value("gpus"));
  fleet::PlanOptions o;
  if (ctx.has("budget")) o.budget = positive_number(ctx.value("budget"), "--budget");
  if (ctx.has("flops")) o.flops = positive_number(ctx.value("flops"), "--flops");
  o.spot = cfg.get_bool("launch.spot");
  memory::RunShape run = memory_run_shape(ctx);
  run.backend = memory::Backend::cuda;
  run.fused_attention = true;
  const std::string precision = cfg.get_string("model.precision") == "auto" ? "bf16" : "";
  const memory::Inventory inv = build_memory_inventory(ctx.args().config_file, ctx.args().overrides, precision);
  const fleet::FleetPlan plan = fleet::plan_fleet(inv, run, gpus, o);
  const std::string engine = ctx.has("engine") ? ctx.value("engine") : cfg.get_string("launch.engine");
  const std::string config_file = ctx.args().config_file ? ctx.args().config_file->string() : "";
  std::vector<std::string> q;
  for (const auto& a : fleet::launch_line(plan, config_file, engine)) q.push_back(fleet::shell_quote(a));
  if (ctx.has("json")) {
    json j = fleet::plan_json(plan);
    j["launch"] = plan.chosen ? json(join(q, " ")) : json(nullptr);
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "sizing " << inv.model << " at " << run.width << "x" << run.height
              << (run.frames > 1 ? ", " + std::to_string(run.frames) + " frames" : std::string()) << ", micro batch "
              << run.micro_batch << (run.cached_latents ? ", cached latents" : "") << " on CUDA (fused attention)\n"
              << fleet::describe_plan(plan, o);
    if (plan.chosen) std::cout << "launch with:\n  " << join(q, " ") << "\n";
  }
  return plan.chosen ? 0 : static_cast<int>(ExitCode::failure);
}

int launch_plan(CommandContext& ctx) {
  if (ctx.has("gpus")) return launch_size(ctx);
  const fleet::Fleet f = build_fleet(ctx);
  const auto ms = fleet::render(f);
  fleet::write_manifests(f, ms);
  print_plan(f, ms);
  std::cout << "submit with `yeto-host launch up` (same arguments), or by hand:\n";
  for (const auto& c : fleet::submit_commands(f, ms)) std::cout << "  " << command_text(f, c) << "\n";
  return 0;
}

// The environment the client commands read: the run secret (SkyPilot's task secret) and the
// syncer's address, never on a command line.
std::map<std::string, std::string> client_env(const fleet::Fleet& f, const fleet::ClientCommand& c,
                                              const std::string& syncer_addr) {
  std::map<std::string, std::string> env;
  for (const auto& v : c.env) {
    if (v == "YETO_RUN_SECRET") env[v] = trim(read_file(f.run_dir / "run.secret"));
    else if (v == "YETO_SYNCER") env[v] = syncer_addr;
  }
  return env;
}

// SkyPilot: the syncer cluster's address once it is up (`sky status --ip`).
std::string sky_syncer_address(const fleet::Fleet& f) {
  const auto r = fleet::run_client({"sky", "status", "--ip", f.name + "-syncer"});
  const std::string ip = trim(r.out);
  if (r.exit_code != 0 || ip.empty())
    throw Error("sky status --ip " + f.name + "-syncer failed (" + std::to_string(r.exit_code) + "): " + trim(r.err) +
                "; the islands need the syncer's address: check `sky status` and run `yeto-host launch up` again");
  const int port = f.s.syncer_port > 0 ? f.s.syncer_port : 29400;
  return ip + ":" + std::to_string(port);
}

int launch_up(CommandContext& ctx) {
  const fleet::Fleet f = build_fleet(ctx);
  const auto ms = fleet::render(f);
  fleet::write_manifests(f, ms);
  print_plan(f, ms);
  const auto cmds = fleet::submit_commands(f, ms);
  const std::string client = cmds.front().argv.front();
  if (!fleet::on_path(client)) {
    std::cout << client << " is not on PATH here: the manifests are written; submit them where the " << client
              << " client is, with:\n";
    for (const auto& c : cmds) std::cout << "  " << command_text(f, c) << "\n";
    return 0;
  }
  if (fs::exists(fleet::record_path(f.run_dir))) {
    const auto old = fleet::read_record(f.run_dir);
    if (!old.jobs.empty() && !ctx.has("force"))
      throw UsageError(fleet::record_path(f.run_dir).string() + " records a fleet already launched from this run directory (" +
                       std::to_string(old.jobs.size()) + " jobs): `yeto-host launch down` it first, or pass --force");
  }
  // A stale address from an earlier launch must not send the new islands to a dead syncer.
  std::error_code ec;
  fs::remove(f.run_dir / "launch" / "syncer.address", ec);
  fleet::FleetRecord rec{fleet::engine_name(f.s.engine), f.name, f.s.k8s_namespace, {}};
  std::map<std::string, std::string> specs, manifests;
  for (std::size_t i = 0; i < f.islands.size(); ++i) specs["island-" + std::to_string(i)] = f.islands[i].to_string();
  for (const auto& m : ms) manifests[m.role] = m.path.string();
  std::string syncer_addr;
  for (const auto& c : cmds) {
    if (f.s.engine == fleet::Engine::skypilot && c.role != "syncer" && syncer_addr.empty()) syncer_addr = sky_syncer_address(f);
    const auto r = fleet::run_client(c.argv, client_env(f, c, syncer_addr));
    if (r.exit_code != 0)
      throw Error(command_text(f, c) + " failed (exit " + std::to_string(r.exit_code) + "): " + trim(r.err + r.out) +
                  (rec.jobs.empty() ? "" : "; the jobs submitted before it are in " + fleet::record_path(f.run_dir).string() +
                                               " (`yeto-host launch down` ends them)"));
    if (!manifests.count(c.role)) continue;  // set-up commands (Kubernetes Secret, ConfigMap)
    std::string handle;
    if (f.s.engine == fleet::Engine::slurm) {
      handle = trim(split(trim(r.out), ';').front());  // --parsable: "JOBID[;CLUSTER]"
      if (handle.empty()) throw Error(command_text(f, c) + " printed no job id: " + r.out);
    } else {
      handle = f.name + "-" + c.role;
    }
    std::string kind;
    if (f.s.engine == fleet::Engine::skypilot) kind = c.argv.size() > 1 && c.argv[1] == "jobs" ? "managed-job" : "cluster";
    rec.jobs.push_back({c.role, specs.count(c.role) ? specs[c.role] : "", manifests[c.role], handle, utc_timestamp(), kind});
    fleet::write_record(f.run_dir, rec);
    std::cout << "submitted " << c.role << ": " << handle << "\n";
  }
  std::cout << "follow it with `yeto-host launch status` and `yeto-host launch logs`; end it with `yeto-host launch down`\n";
  return 0;
}

// Slurm: the state of each recorded job (squeue while queued or running, scontrol after).
std::map<std::string, std::string> slurm_states(const fleet::FleetRecord& rec) {
  std::map<std::string, std::string> st;
  std::vector<std::string> ids;
  for (const auto& j : rec.jobs) ids.push_back(j.job);
  const auto q = fleet::run_client({"squeue", "--noheader", "--jobs", join(ids, ","), "--format", "%i|%T|%M|%R"});
  for (const auto& line : split(q.out, '\n')) {
    const auto parts = split(trim(line), '|');
    if (parts.size() >= 4) st[parts[0]] = parts[1] + " " + parts[2] + " " + parts[3];
  }
  for (const auto& id : ids) {
    if (st.count(id)) continue;
    const auto s = fleet::run_client({"scontrol", "--oneliner", "show", "job", id});
    std::string state = "ENDED", code;
    for (const auto& kv : split(s.out, ' ')) {
      if (starts_with(kv, "JobState=")) state = kv.substr(9);
      if (starts_with(kv, "ExitCode=")) code = " exit " + kv.substr(9);
    }
    st[id] = state + code;
  }
  return st;
}

// The last samples/s an island's learner logged (RUN_DIR/island-<i>/metrics.jsonl), or < 0.
double last_samples_per_s(const fs::path& metrics) {
  std::error_code ec;
  const auto size = fs::file_size(metrics, ec);
  if (ec) return -1;
  std::ifstream in(metrics, std::ios::binary);
  const std::uintmax_t tail = std::min<std::uintmax_t>(size, 65536);
  in.seekg(static_cast<std::streamoff>(size - tail));
  std::string text(static_cast<std::size_t>(tail), '\0');
  in.read(text.data(), static_cast<std::streamsize>(tail));
  double v = -1;
  for (const auto& line : split(text, '\n')) {
    const json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("samples_per_s") && j["samples_per_s"].is_number()) v = j["samples_per_s"].get<double>();
  }
  return v;
}

int launch_status(CommandContext& ctx) {
  const fs::path run_dir = fs::absolute(ctx.config().get_path("run.output"));
  const fleet::FleetRecord rec = fleet::read_record(run_dir);
  const fleet::Engine engine = fleet::parse_engine(rec.engine);
  std::map<std::string, std::string> states;
  std::string engine_view;
  if (engine == fleet::Engine::slurm) {
    states = slurm_states(rec);
  } else if (engine == fleet::Engine::skypilot) {
    const auto j = fleet::run_client({"sky", "jobs", "queue"});
    const auto c = fleet::run_client({"sky", "status"});
    engine_view = j.exit_code == 127 ? "(sky is not on PATH here)\n" : j.out + c.out;
  } else {
    const auto k = fleet::run_client({"kubectl", "--namespace", rec.k8s_namespace, "get", "jobs,pods", "--selector",
                                      "app.kubernetes.io/instance=" + rec.name});
    engine_view = k.exit_code == 127 ? "(kubectl is not on PATH here)\n" : k.out + k.err;
  }
  // The run's own view where the run directory is shared (Slurm): merges and islands.
  json summary;
  const std::uint32_t islands = static_cast<std::uint32_t>(rec.jobs.size() > 0 ? rec.jobs.size() - 1 : 0);
  if (fs::exists(run_dir / "syncer" / "tape.jsonl")) summary = sync::embedded_summary(run_dir, islands);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::ostringstream o;
  o << "fleet " << rec.name << " on " << rec.engine << " (" << run_dir.string() << ")\n";
  for (const auto& j : rec.jobs) {
    o << "  " << j.role << "  job " << j.job;
    if (!j.spec.empty()) o << "  " << j.spec;
    if (states.count(j.job)) o << "  " << states[j.job];
    if (summary.is_object() && starts_with(j.role, "island-"))
      for (const auto& isl : summary.value("per_island", json::array()))
        if (isl.value("id", "") == j.role) {
          o << "  merged pushes " << isl.value("merged_pushes", 0) << ", steps " << isl.value("steps", json(0)).dump();
          if (isl.contains("last_merge_time"))
            o << ", last merge " << static_cast<long>(now - isl["last_merge_time"].get<double>()) << " s ago";
          if (const double sps = last_samples_per_s(run_dir / j.role / "metrics.jsonl"); sps >= 0)
            o << ", " << std::fixed << std::setprecision(2) << sps << std::defaultfloat << " samples/s";
          if (isl.value("acknowledged_final_cut", false)) o << ", holds the final cut";
        }
    o << "\n";
  }
  if (summary.is_object())
    o << "  syncer: " << summary.value("outer_steps_merged", 0) << " merges (" << summary.value("merges_with_every_island", 0)
      << " with every island, " << summary.value("merges_with_every_live_island", 0) << " with every live island: "
      << std::fixed << std::setprecision(0) << 100.0 * summary.value("participation", 0.0) << std::defaultfloat
      << " %)" << (summary["final_cut"].is_null() ? "" : ", final cut taken") << "\n";
  o << engine_view;
  std::cout << o.str();
  return 0;
}

// A SkyPilot job is a managed job or a cluster as it was submitted (the record says; a record
// without the field is read as launch.spot says now).
bool sky_managed(const fleet::JobRecord& j, const config::Config& cfg) {
  if (!j.kind.empty()) return j.kind == "managed-job";
  return j.role != "syncer" && cfg.get_bool("launch.spot");
}

int launch_logs(CommandContext& ctx) {
  const fs::path run_dir = fs::absolute(ctx.config().get_path("run.output"));
  const fleet::FleetRecord rec = fleet::read_record(run_dir);
  const std::string role = ctx.has("island") ? "island-" + ctx.value("island") : "syncer";
  const fleet::JobRecord* job = nullptr;
  for (const auto& j : rec.jobs)
    if (j.role == role) job = &j;
  if (job == nullptr) throw UsageError("launch logs: the fleet has no " + role + " (see `yeto-host launch status`)");
  const fleet::Engine engine = fleet::parse_engine(rec.engine);
  if (engine == fleet::Engine::slurm) {
    const fs::path log = run_dir / role / "slurm.log";
    if (!fs::exists(log)) throw Error(log.string() + ": no log yet (job " + job->job + " has not started)", ExitCode::not_found);
    std::cout << read_file(log);
    return 0;
  }
  std::vector<std::string> argv;
  if (engine == fleet::Engine::skypilot)
    argv = sky_managed(*job, ctx.config())
               ? std::vector<std::string>{"sky", "jobs", "logs", "--no-follow", "--name", job->job}
               : std::vector<std::string>{"sky", "logs", "--no-follow", job->job};
  else
    argv = {"kubectl", "--namespace", rec.k8s_namespace, "logs", "--all-containers", "--prefix", "job/" + job->job};
  const auto r = fleet::run_client(argv);
  std::cout << r.out;
  std::cerr << r.err;
  return r.exit_code == 0 ? 0 : static_cast<int>(ExitCode::failure);
}

int launch_down(CommandContext& ctx) {
  const fs::path run_dir = fs::absolute(ctx.config().get_path("run.output"));
  fleet::FleetRecord rec = fleet::read_record(run_dir);
  const fleet::Engine engine = fleet::parse_engine(rec.engine);
  std::vector<std::vector<std::string>> cmds;
  if (engine == fleet::Engine::slurm) {
    std::vector<std::string> a{"scancel"};
    for (const auto& j : rec.jobs) a.push_back(j.job);
    cmds.push_back(a);
  } else if (engine == fleet::Engine::skypilot) {
    for (const auto& j : rec.jobs) {
      if (sky_managed(j, ctx.config()))
        cmds.push_back({"sky", "jobs", "cancel", "--yes", "--name", j.job});
      else
        cmds.push_back({"sky", "down", "--yes", j.job});
    }
  } else {
    for (const auto& j : rec.jobs) cmds.push_back({"kubectl", "delete", "--ignore-not-found", "-f", j.manifest});
    cmds.push_back({"kubectl", "--namespace", rec.k8s_namespace, "delete", "--ignore-not-found", "secret", rec.name + "-secret"});
    cmds.push_back({"kubectl", "--namespace", rec.k8s_namespace, "delete", "--ignore-not-found", "configmap", rec.name + "-config"});
  }
  int failures = 0;
  for (const auto& a : cmds) {
    const auto r = fleet::run_client(a);
    // SkyPilot: a managed job that already ended, or a cluster already down, reports "not found".
    if (r.exit_code != 0 && engine != fleet::Engine::skypilot) {
      ++failures;
      std::cerr << join(a, " ") << " failed (exit " << r.exit_code << "): " << trim(r.err + r.out) << "\n";
    }
  }
  if (failures == 0) {
    rec.jobs.clear();
    fleet::write_record(run_dir, rec);
    std::cout << "fleet " << rec.name << ": every job cancelled\n";
    return 0;
  }
  return static_cast<int>(ExitCode::failure);
}

int run_launch(CommandContext& ctx) {
  const std::string sub = ctx.positionals().at(0);
  if (sub == "plan") return launch_plan(ctx);
  if (sub == "up") return launch_up(ctx);
  if (sub == "status") return launch_status(ctx);
  if (sub == "logs") return launch_logs(ctx);
  if (sub == "down") return launch_down(ctx);
  throw UsageError("launch: unknown subcommand '" + sub + "' (expected plan, up, status, logs or down)" +
                   did_you_mean(sub, {"plan", "up", "status", "logs", "down"}));
}

}  // namespace

void register_launch_command(Registry& r) {
  Command c;
  c.name = "launch";
  c.summary = "Run the syncer and the islands on Slurm, SkyPilot or Kubernetes (plan | up | status | logs | down).";
  c.description =
      "Hands the run the config describes to a cluster engine: one job per island (--gpu "
      "cloud:[nodes x]<count>x<gpu>[@region], once per island, or launch.islands) and one for the syncer. `plan` "
      "writes the engine's manifests into RUN_DIR/launch/<engine>/ and prints them with the commands that submit "
      "them; `up` writes and submits them with the engine's own client (sbatch, sky, kubectl; without the client on "
      "PATH it prints the commands) and records the jobs in RUN_DIR/launch/fleet.json; `status` shows each job's "
      "state and, where the run directory is shared (Slurm), merges and the islands' progress; `logs` prints the "
      "syncer's log or an island's (--island I); `down` cancels every job. The run secret and the syncer's address "
      "never appear in a manifest or on a command line. See docs/FLEET.md.";
  c.positionals = "plan|up|status|logs|down";
  c.min_positionals = 1;
  c.max_positionals = 1;
  c.run_config = true;
  c.options = {
      {"engine", "NAME", "slurm, skypilot or kubernetes; default: launch.engine.", false, 0},
      {"gpu", "SPEC", "One island: cloud:[nodes x]<count>x<gpu>[@region] (repeat per island); replaces launch.islands.", true, 0},
      {"island", "I", "logs: the island whose log to print (default: the syncer's).", false, 0},
      {"force", "", "up: launch even though the run directory records a fleet that was not taken down.", false, 0},
      {"gpus", "TABLE", "plan: size islands from this GPU table (TOML [[gpu]]: name, memory_gb, price, spot_price, tflops, "
                        "regions, max_per_node, host_memory_gb) with the memory model, print the plan, the rejected shapes and the launch line "
                        "instead of writing manifests.", false, 0},
      {"budget", "USD_PER_H", "plan --gpus: the fleet's $/h; the most effective TFLOPs within it.", false, 0},
      {"flops", "TFLOPS", "plan --gpus: the fleet's effective TFLOPs target; the cheapest fleet reaching it.", false, 0},
      {"cached-latents", "", "plan --gpus: the run trains on cached latents: no media encoding (the VAE and text encoders count "
                               "unless model_index.json lists them as null).", false, 0},
      {"json", "", "plan --gpus: print the plan as JSON.", false, 0},
  };
  c.run = run_launch;
  r.add(std::move(c));
}

}  // namespace yeto::app
