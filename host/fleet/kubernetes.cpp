// Kubernetes: the syncer as a Job behind a Service, each island as an Indexed Job (one pod per
// node, completion index = node rank) behind a headless Service that gives rank 0's pod a
// stable DNS name (MASTER_ADDR). The run secret is a Secret created from RUN_DIR/run.secret
// by the submitting kubectl (never written into a manifest) and mounted read-only; the config
// is a ConfigMap created from the file; data, model and the run directory live in the
// PersistentVolumeClaim launch.volume_claim, mounted at launch.mount. With launch.queue the
// Jobs carry Kueue's queue-name label and start suspended until Kueue admits them.
#include <sstream>

#include "core/error.hpp"
#include "fleet/engines.hpp"

namespace yeto::fleet {
namespace {

constexpr int kDefaultPort = 29400;
constexpr const char* kSecretDir = "/var/run/yeto";

int port(const Fleet& f) { return f.s.syncer_port > 0 ? f.s.syncer_port : kDefaultPort; }
std::string secret_name(const Fleet& f) { return f.name + "-secret"; }
std::string config_name(const Fleet& f) { return f.name + "-config"; }

JobPaths k8s_paths(const Fleet& f) {
  JobPaths p;
  p.host_bin = f.s.host_bin;
  p.config = f.config_file.empty() ? "" : std::string(kSecretDir) + "/config/run.toml";
  p.run_dir = f.s.mount + "/run";
  p.secret = {std::string(kSecretDir) + "/secret/run.secret"};
  return p;
}

void labels(std::ostringstream& o, const Fleet& f, const std::string& role, int indent) {
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  o << pad << "labels:\n"
    << pad << "  app.kubernetes.io/name: yeto\n"
    << pad << "  app.kubernetes.io/instance: " << f.name << "\n"
    << pad << "  yeto.dev/role: " << role << "\n";
}

// The pod template's spec: one container running `script`, the secret, config and run volumes.
void pod_spec(std::ostringstream& o, const Fleet& f, const std::string& role, const std::string& script,
              const IslandSpec* spec, const std::string& subdomain) {
  o << "  template:\n    metadata:\n";
  labels(o, f, role, 6);
  o << "    spec:\n"
    << "      restartPolicy: Never\n";
  if (!subdomain.empty()) o << "      subdomain: " << subdomain << "\n";
  if (spec != nullptr && !spec->default_cloud())
    o << "      nodeSelector:\n        yeto.dev/pool: " << yaml_str(spec->cloud) << "\n";
  o << "      containers:\n"
    << "        - name: yeto\n"
    << "          image: " << yaml_str(f.s.image) << "\n"
    << "          command: [\"/bin/bash\", \"-c\"]\n"
    << "          args:\n            - " << yaml_block(script, 14);
  if (spec != nullptr) {
    o << "          env:\n"
      << "            - name: MASTER_ADDR\n              value: " << subdomain << "-0." << subdomain << "\n"
      << "            - name: MASTER_PORT\n              value: \"29500\"\n";
  }
  o << "          ports:\n            - containerPort: " << (spec == nullptr ? port(f) : 29500) << "\n";
  o << "          resources:\n";
  if (spec != nullptr && !spec->cpu_only())
    o << "            limits:\n              nvidia.com/gpu: " << spec->per_node << "\n";
  else
    o << "            requests:\n              cpu: \"" << (spec != nullptr ? spec->per_node : 2) << "\"\n";
  o << "          volumeMounts:\n"
    << "            - name: secret\n              mountPath: " << kSecretDir << "/secret\n              readOnly: true\n";
  if (!f.config_file.empty())
    o << "            - name: config\n              mountPath: " << kSecretDir << "/config\n              readOnly: true\n";
  if (!f.s.volume_claim.empty()) o << "            - name: run\n              mountPath: " << yaml_str(f.s.mount) << "\n";
  o << "      volumes:\n"
    << "        - name: secret\n          secret:\n            secretName: " << secret_name(f)
    << "\n            defaultMode: 0400\n";
  if (!f.config_file.empty()) o << "        - name: config\n          configMap:\n            name: " << config_name(f) << "\n";
  if (!f.s.volume_claim.empty())
    o << "        - name: run\n          persistentVolumeClaim:\n            claimName: " << yaml_str(f.s.volume_claim) << "\n";
}

void job_head(std::ostringstream& o, const Fleet& f, const std::string& name, const std::string& role) {
  o << "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: " << name << "\n  namespace: " << yaml_str(f.s.k8s_namespace) << "\n";
  labels(o, f, role, 2);
  if (!f.s.queue.empty()) o << "    kueue.x-k8s.io/queue-name: " << yaml_str(f.s.queue) << "\n";
  o << "spec:\n";
  if (!f.s.queue.empty()) o << "  suspend: true\n";
}

std::string syncer_yaml(const Fleet& f) {
  std::ostringstream o;
  const std::string name = f.name + "-syncer";
  o << "# The syncer (head) of Yeto run " << f.name << ". Written by `yeto-host launch`.\n"
    << "apiVersion: v1\nkind: Service\nmetadata:\n  name: " << name << "\n  namespace: " << yaml_str(f.s.k8s_namespace) << "\n";
  labels(o, f, "syncer", 2);
  o << "spec:\n  selector:\n    yeto.dev/role: syncer\n    app.kubernetes.io/instance: " << f.name << "\n"
    << "  ports:\n    - name: sync\n      port: " << port(f) << "\n      targetPort: " << port(f) << "\n"
    << "---\n";
  job_head(o, f, name, "syncer");
  o << "  backoffLimit: " << f.s.island_restarts << "\n";
  const std::string script = "set -euo pipefail\nexec " + shell_line(syncer_words(f, k8s_paths(f), port(f))) + "\n";
  pod_spec(o, f, "syncer", script, nullptr, "");
  return o.str();
}

std::string island_yaml(const Fleet& f, std::size_t i) {
  const IslandSpec& spec = f.islands[i];
  const std::string name = f.name + "-" + island_role(i);
  std::ostringstream o;
  o << "# Island " << i << " of Yeto run " << f.name << ": " << spec.to_string() << ". Written by `yeto-host launch`.\n"
    << "apiVersion: v1\nkind: Service\nmetadata:\n  name: " << name << "\n  namespace: " << yaml_str(f.s.k8s_namespace) << "\n";
  labels(o, f, island_role(i), 2);
  // Rank 0's name resolves while the ranks meet, before any readiness.
  o << "spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n  selector:\n    job-name: " << name << "\n---\n";
  job_head(o, f, name, island_role(i));
  o << "  completionMode: Indexed\n"
    << "  completions: " << spec.nodes << "\n"
    << "  parallelism: " << spec.nodes << "\n"
    << "  backoffLimit: " << f.s.island_restarts << "\n";
  const std::string syncer = f.name + "-syncer." + f.s.k8s_namespace + ".svc:" + std::to_string(port(f));
  std::ostringstream s;
  s << "set -euo pipefail\n"
    << "per_node=" << spec.per_node << "\n"
    << "pids=()\n"
    << "for local_rank in $(seq 0 $((per_node - 1))); do\n";
  if (spec.ranks() > 1)
    s << "  RANK=$((JOB_COMPLETION_INDEX * per_node + local_rank)) WORLD_SIZE=" << spec.ranks()
      << " LOCAL_RANK=$local_rank LOCAL_WORLD_SIZE=$per_node \\\n    ";
  else
    s << "  ";
  s << shell_line(learner_words(f, k8s_paths(f), i, {syncer})) << " &\n"
    << "  pids+=($!)\n"
    << "done\n"
    << "rc=0\n"
    << "for pid in \"${pids[@]}\"; do wait \"$pid\" || rc=$?; done\n"
    << "exit \"$rc\"\n";
  pod_spec(o, f, island_role(i), s.str(), &spec, name);
  return o.str();
}

}  // namespace

std::vector<Manifest> render_kubernetes(const Fleet& f) {
  if (f.s.image.empty())
    throw UsageError("launch --engine kubernetes needs a container image holding yeto-host: set launch.image");
  return render_each(f, "kubernetes", ".yaml", syncer_yaml, island_yaml);
}

std::vector<ClientCommand> submit_kubernetes(const Fleet& f, const std::vector<Manifest>& ms) {
  std::vector<ClientCommand> out;
  const std::string ns = f.s.k8s_namespace;
  out.push_back({"secret", {"kubectl", "--namespace", ns, "create", "secret", "generic", secret_name(f),
                            "--from-file=run.secret=" + (f.run_dir / "run.secret").string()}, {}});
  if (!f.config_file.empty())
    out.push_back({"config", {"kubectl", "--namespace", ns, "create", "configmap", config_name(f),
                              "--from-file=run.toml=" + f.config_file.string()}, {}});
  for (const auto& m : ms) out.push_back({m.role, {"kubectl", "apply", "-f", m.path.string()}, {}});
  return out;
}

}  // namespace yeto::fleet
