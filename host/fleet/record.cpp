#include "fleet/record.hpp"

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace yeto::fleet {

using json = nlohmann::json;

std::filesystem::path record_path(const std::filesystem::path& run_dir) { return run_dir / "launch" / "fleet.json"; }

void write_record(const std::filesystem::path& run_dir, const FleetRecord& r) {
  json j{{"format", 1}, {"engine", r.engine}, {"name", r.name}, {"namespace", r.k8s_namespace}, {"jobs", json::array()}};
  for (const auto& job : r.jobs)
    j["jobs"].push_back({{"role", job.role}, {"spec", job.spec}, {"manifest", job.manifest}, {"job", job.job},
                         {"submitted", job.submitted}, {"kind", job.kind}});
  std::filesystem::create_directories(record_path(run_dir).parent_path());
  atomic_write(record_path(run_dir), j.dump(2) + "\n", 0600);
}

FleetRecord read_record(const std::filesystem::path& run_dir) {
  const auto path = record_path(run_dir);
  if (!std::filesystem::exists(path))
    throw Error(path.string() + ": no fleet launched from this run directory (run `yeto-host launch up` first)",
                ExitCode::not_found);
  FleetRecord r;
  try {
    const json j = json::parse(read_file(path));
    if (j.value("format", 0) != 1) throw std::runtime_error("unknown format " + j.value("format", json()).dump());
    r.engine = j.at("engine").get<std::string>();
    r.name = j.at("name").get<std::string>();
    r.k8s_namespace = j.value("namespace", "default");
    for (const auto& e : j.at("jobs"))
      r.jobs.push_back({e.at("role").get<std::string>(), e.value("spec", ""), e.value("manifest", ""),
                        e.at("job").get<std::string>(), e.value("submitted", ""), e.value("kind", "")});
    for (const auto& job : r.jobs)
      if (!job.kind.empty() && job.kind != "managed-job" && job.kind != "cluster")
        throw std::runtime_error("job '" + job.role + "': unknown kind '" + job.kind + "'");
    if (r.engine != "slurm" && r.engine != "skypilot" && r.engine != "kubernetes")
      throw std::runtime_error("unknown engine '" + r.engine + "'");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(path.string() + ": not a fleet record: " + e.what() + " (launch again, or remove the file)",
                ExitCode::bad_input);
  }
  return r;
}

}  // namespace yeto::fleet
