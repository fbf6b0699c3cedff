#include "fleet/fleet.hpp"

#include <cctype>

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "fleet/engines.hpp"
#include "sync/launch.hpp"

namespace yeto::fleet {

Engine parse_engine(const std::string& name) {
  if (name == "slurm") return Engine::slurm;
  if (name == "skypilot" || name == "sky") return Engine::skypilot;
  if (name == "kubernetes" || name == "k8s") return Engine::kubernetes;
  throw UsageError("--engine '" + name + "': expected slurm, skypilot or kubernetes");
}

std::string engine_name(Engine e) {
  switch (e) {
    case Engine::slurm: return "slurm";
    case Engine::skypilot: return "skypilot";
    case Engine::kubernetes: return "kubernetes";
  }
  return "?";
}

LaunchSettings launch_settings_from_config(const config::Config& cfg) {
  LaunchSettings s;
  s.engine = parse_engine(cfg.get_string("launch.engine"));
  s.syncer_port = static_cast<int>(cfg.get_int("launch.syncer_port"));
  s.syncer_host = cfg.get_string("launch.syncer_host");
  s.host_bin = cfg.get_string("launch.host_bin");
  s.setup = cfg.get_string("launch.setup");
  s.time_limit = cfg.get_string("launch.time_limit");
  s.account = cfg.get_string("launch.account");
  s.spot = cfg.get_bool("launch.spot");
  s.island_restarts = static_cast<int>(cfg.get_int("launch.island_restarts"));
  s.syncer_wait_s = cfg.get_number("launch.syncer_wait_s");
  s.image = cfg.get_string("launch.image");
  s.k8s_namespace = cfg.get_string("launch.namespace");
  s.queue = cfg.get_string("launch.queue");
  s.volume_claim = cfg.get_string("launch.volume_claim");
  s.mount = cfg.get_string("launch.mount");
  s.syncer_cloud = cfg.get_string("launch.syncer_cloud");
  return s;
}

std::string fleet_name(const std::string& run_name) {
  std::string out = "yeto-";
  bool dash = true;
  for (char c : run_name) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) {
      out.push_back(static_cast<char>(std::tolower(u)));
      dash = false;
    } else if (!dash) {
      out.push_back('-');
      dash = true;
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out == "yeto") out = "yeto-run";
  if (out.size() > 40) out.resize(40);
  while (out.back() == '-') out.pop_back();
  return out;
}

std::string shell_quote(const std::string& s) {
  bool plain = !s.empty();
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) == 0 && std::string_view("-_./:=,+@%").find(c) == std::string_view::npos) plain = false;
  }
  if (plain) return s;
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q.push_back(c);
  }
  return q + "'";
}

std::vector<Manifest> render(const Fleet& fleet) {
  if (fleet.islands.empty()) throw UsageError("launch: no islands (give --gpu cloud:<count>x<gpu> once per island, or launch.islands)");
  switch (fleet.s.engine) {
    case Engine::slurm: return render_slurm(fleet);
    case Engine::skypilot: return render_skypilot(fleet);
    case Engine::kubernetes: return render_kubernetes(fleet);
  }
  return {};
}

std::vector<ClientCommand> submit_commands(const Fleet& fleet, const std::vector<Manifest>& manifests) {
  switch (fleet.s.engine) {
    case Engine::slurm: return submit_slurm(fleet, manifests);
    case Engine::skypilot: return submit_skypilot(fleet, manifests);
    case Engine::kubernetes: return submit_kubernetes(fleet, manifests);
  }
  return {};
}

void write_manifests(const Fleet& fleet, const std::vector<Manifest>& manifests) {
  std::filesystem::create_directories(fleet.run_dir);
  sync::ensure_run_secret(fleet.run_dir);
  // RUN_DIR/launch holds the syncer's published address: private to the user.
  std::filesystem::create_directories(fleet.run_dir / "launch");
  std::filesystem::permissions(fleet.run_dir / "launch", std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace);
  // Slurm opens a job's --output file (RUN_DIR/<role>/slurm.log) before the script runs.
  if (fleet.s.engine == Engine::slurm)
    for (const auto& m : manifests) std::filesystem::create_directories(fleet.run_dir / m.role);
  for (const auto& m : manifests) {
    std::filesystem::create_directories(m.path.parent_path());
    std::filesystem::permissions(m.path.parent_path(), std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace);
    atomic_write(m.path, m.text, 0600);
  }
}

}  // namespace yeto::fleet
