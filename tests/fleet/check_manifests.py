"""Parses the manifests `yeto-host launch` writes back and checks them field by field.

Usage: check_manifests.py CASES.json, where each case names an engine, the directory of its
manifests, whether islands are spot, and the island specs. Exits non-zero with every failure.
"""
import json
import os
import re
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k8s_schema  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def parse_spec(spec):
    cloud, rest = spec.split(":", 1)
    region = ""
    if "@" in rest:
        rest, region = rest.split("@", 1)
    parts = rest.split("x")
    nums = []
    while len(nums) < 2 and parts and parts[0].isdigit() and len(parts) > 1:
        nums.append(int(parts.pop(0)))
    gpu = "x".join(parts)
    nodes, per_node = (nums[0], nums[1]) if len(nums) == 2 else (1, nums[0])
    return {"cloud": cloud, "nodes": nodes, "per_node": per_node, "gpu": gpu, "region": region}


DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def learner_args_ok(text, i, n, where):
    check(f"--learner-id island-{i}" in text, f"{where}: learner id island-{i}")
    check(f"--island-rank {i}" in text, f"{where}: island rank {i}")
    check(f"sync.islands={n}" in text, f"{where}: sync.islands={n}")


def check_slurm(case, n):
    d = case["dir"]
    for i, spec in enumerate(case["specs"]):
        s = parse_spec(spec)
        path = os.path.join(d, f"island-{i}.sbatch")
        text = open(path).read()
        check(subprocess.run(["bash", "-n", path]).returncode == 0, f"{path}: bash -n")
        opts = {}
        for line in text.splitlines():
            if line.startswith("#SBATCH "):
                k, _, v = line[len("#SBATCH "):].partition("=")
                opts[k] = v
        check(opts.get("--nodes") == str(s["nodes"]), f"{path}: --nodes")
        check(opts.get("--ntasks-per-node") == str(s["per_node"]), f"{path}: --ntasks-per-node")
        if s["gpu"] == "cpu":
            check("--gpus-per-node" not in opts, f"{path}: no GPUs for a CPU island")
        else:
            check(opts.get("--gpus-per-node") == str(s["per_node"]), f"{path}: --gpus-per-node")
        if s["cloud"] in ("slurm", "default", "k8s"):
            check("--partition" not in opts, f"{path}: default partition")
        else:
            check(opts.get("--partition") == s["cloud"], f"{path}: --partition")
        check(opts.get("--signal") == "B:TERM@120", f"{path}: --signal")
        check("--requeue" in opts, f"{path}: --requeue")
        check(opts.get("--job-name") == f"yeto-demo-island-{i}", f"{path}: --job-name")
        learner_args_ok(text, i, n, path)
        ranks = s["nodes"] * s["per_node"]
        check(("RANK=$SLURM_PROCID" in text) == (ranks > 1), f"{path}: rank variables iff several ranks")
        check("syncer.address" in text, f"{path}: reads the syncer's address")
    path = os.path.join(d, "syncer.sbatch")
    check(subprocess.run(["bash", "-n", path]).returncode == 0, f"{path}: bash -n")
    text = open(path).read()
    check(" syncer " in text and "--state-dir" in text, f"{path}: runs the syncer")


def check_skypilot(case, n):
    d = case["dir"]
    head = yaml.safe_load(open(os.path.join(d, "syncer.yaml")))
    check(head["name"] == "yeto-demo-syncer", "syncer name")
    check(head["resources"]["use_spot"] is False, "syncer on demand")
    check(head["resources"]["ports"] == 29400, "syncer port opened")
    check(head["secrets"] == {"YETO_RUN_SECRET": None}, "syncer secret declared, no value")
    check("/yeto/run.toml" in head["file_mounts"], "config uploaded")
    check("syncer" in head["run"] and "--listen 0.0.0.0:29400" in head["run"], "syncer run")
    for i, spec in enumerate(case["specs"]):
        s = parse_spec(spec)
        where = f"{case['name']} island-{i}"
        t = yaml.safe_load(open(os.path.join(d, f"island-{i}.yaml")))
        check(set(t) <= {"name", "num_nodes", "resources", "envs", "secrets", "file_mounts", "setup", "run"},
              f"{where}: only SkyPilot task fields ({sorted(t)})")
        check(t["name"] == f"yeto-demo-island-{i}", f"{where}: name")
        check(t["num_nodes"] == s["nodes"], f"{where}: num_nodes")
        r = t["resources"]
        if s["gpu"] == "cpu":
            check(r.get("cpus") == f"{s['per_node']}+", f"{where}: cpus")
        else:
            check(r.get("accelerators") == f"{s['gpu']}:{s['per_node']}", f"{where}: accelerators {r.get('accelerators')}")
        if s["cloud"] in ("default", "slurm", "k8s"):
            check("infra" not in r, f"{where}: any infra")
        else:
            check(r.get("infra") == s["cloud"] + ("/" + s["region"] if s["region"] else ""), f"{where}: infra")
        check(r["use_spot"] is case["spot"], f"{where}: use_spot")
        check(("job_recovery" in r) == case["spot"], f"{where}: job_recovery on spot")
        check(t["envs"] == {"YETO_SYNCER": None}, f"{where}: syncer address from the environment")
        check(t["secrets"] == {"YETO_RUN_SECRET": None}, f"{where}: secret declared, no value")
        check(t["setup"].strip() == "module load cuda/12.4", f"{where}: setup")
        run = t["run"]
        learner_args_ok(run, i, n, where)
        check('"$YETO_SYNCER"' in run, f"{where}: --syncer from the environment")
        check(("SKYPILOT_NODE_RANK" in run) == (s["nodes"] * s["per_node"] > 1), f"{where}: ranks from SkyPilot")
        check(f"per_node={s['per_node']}" in run, f"{where}: per-node ranks")


def check_k8s(case, n):
    d = case["dir"]
    for fname in ["syncer.yaml"] + [f"island-{i}.yaml" for i in range(n)]:
        docs = list(yaml.safe_load_all(open(os.path.join(d, fname))))
        where = f"{case['name']} {fname}"
        check([x["kind"] for x in docs] == ["Service", "Job"], f"{where}: a Service and a Job")
        for doc in docs:
            for e in k8s_schema.validate(doc):
                failures.append(f"{where}: schema: {e}")
        svc, job = docs
        for obj in docs:
            check(DNS.match(obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63, f"{where}: DNS-1123 name")
            check(obj["metadata"]["namespace"] == "default", f"{where}: namespace")
        check(svc["apiVersion"] == "v1" and job["apiVersion"] == "batch/v1", f"{where}: apiVersion")
        labels = job["metadata"]["labels"]
        check(labels.get("kueue.x-k8s.io/queue-name") == "team-a", f"{where}: Kueue queue label")
        check(job["spec"].get("suspend") is True, f"{where}: suspended until Kueue admits it")
        pod = job["spec"]["template"]["spec"]
        check(pod["restartPolicy"] == "Never", f"{where}: restartPolicy")
        c = pod["containers"][0]
        check(c["image"] == "ghcr.io/example/yeto:1.0", f"{where}: image")
        check(isinstance(c["args"], list) and len(c["args"]) == 1, f"{where}: one script")
        vols = {v["name"]: v for v in pod["volumes"]}
        check(vols["secret"]["secret"]["secretName"] == "yeto-demo-secret", f"{where}: secret volume")
        check(vols["secret"]["secret"]["defaultMode"] == 0o400, f"{where}: secret read-only for the owner")
        check(vols["run"]["persistentVolumeClaim"]["claimName"] == "yeto-runs", f"{where}: run volume")
        check(vols["config"]["configMap"]["name"] == "yeto-demo-config", f"{where}: config volume")
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        check(mounts["secret"]["readOnly"] is True, f"{where}: secret mounted read-only")
        if fname == "syncer.yaml":
            check(svc["spec"]["ports"][0]["port"] == 29400, f"{where}: syncer port")
            check(svc["spec"]["selector"]["yeto.dev/role"] == "syncer", f"{where}: selects the syncer pod")
            continue
        i = int(fname.split("-")[1].split(".")[0])
        s = parse_spec(case["specs"][i])
        check(svc["spec"]["clusterIP"] == "None", f"{where}: headless service")
        check(svc["spec"]["publishNotReadyAddresses"] is True, f"{where}: rank 0 resolves before readiness")
        check(svc["spec"]["selector"]["job-name"] == job["metadata"]["name"], f"{where}: selects the Job's pods")
        check(pod["subdomain"] == svc["metadata"]["name"], f"{where}: pods get DNS names")
        check(job["spec"]["completionMode"] == "Indexed", f"{where}: Indexed")
        check(job["spec"]["completions"] == s["nodes"] and job["spec"]["parallelism"] == s["nodes"], f"{where}: one pod per node")
        env = {e["name"]: e["value"] for e in c["env"]}
        check(env["MASTER_ADDR"] == f"{job['metadata']['name']}-0.{svc['metadata']['name']}", f"{where}: MASTER_ADDR")
        if s["gpu"] == "cpu":
            check(c["resources"]["requests"]["cpu"] == str(s["per_node"]), f"{where}: cpu request")
        else:
            check(c["resources"]["limits"]["nvidia.com/gpu"] == s["per_node"], f"{where}: GPU limit")
        if s["cloud"] not in ("k8s", "default", "slurm"):
            check(pod["nodeSelector"]["yeto.dev/pool"] == s["cloud"], f"{where}: node pool")
        script = c["args"][0]
        learner_args_ok(script, i, n, where)
        check("yeto-demo-syncer.default.svc:29400" in script, f"{where}: syncer Service address")
        check(("JOB_COMPLETION_INDEX" in script) == (s["nodes"] * s["per_node"] > 1), f"{where}: ranks from the index")


def schema_rejects_broken_manifests(path):
    """The schema check must fail on what the API server refuses: each mutation of a valid Job
    must produce an error naming it."""
    svc, job = list(yaml.safe_load_all(open(path)))
    check(k8s_schema.validate(svc) == [] and k8s_schema.validate(job) == [], f"{path}: valid before mutation")

    def mutated(edit, expect):
        import copy
        j = copy.deepcopy(job)
        edit(j)
        errs = k8s_schema.validate(j)
        check(any(expect in e for e in errs), f"schema self-check: expected an error with '{expect}', got {errs}")

    pod = lambda j: j["spec"]["template"]["spec"]
    mutated(lambda j: pod(j)["containers"][0].update(imagePullPolicy="Sometimes"), "imagePullPolicy")
    mutated(lambda j: pod(j)["containers"][0].update(volumeMount=[]), "unknown field 'volumeMount'")
    mutated(lambda j: pod(j)["containers"][0]["env"].append({"name": "PORT", "value": 29500}), "is not a string")
    mutated(lambda j: pod(j).update(restartPolicy="Always"), "restartPolicy Never or OnFailure")
    mutated(lambda j: pod(j)["containers"][0].pop("image"), "required field 'image'")
    mutated(lambda j: pod(j)["containers"][0].update(ports=[{"containerPort": 70000}]), "port number")
    mutated(lambda j: j["metadata"]["labels"].update({"yeto.dev/role": "a b"}), "label value")
    mutated(lambda j: j["spec"].pop("completions"), "needs completions")
    mutated(lambda j: pod(j)["volumes"][0]["secret"].update(defaultMode=0o1000), "file mode")
    mutated(lambda j: j["metadata"].update(name="Island_1"), "DNS-1123")


def main():
    cases = json.load(open(sys.argv[1]))
    for case in cases:
        n = len(case["specs"])
        {"slurm": check_slurm, "skypilot": check_skypilot, "kubernetes": check_k8s}[case["engine"]](case, n)
    k8s = [c for c in cases if c["engine"] == "kubernetes"]
    if k8s:
        schema_rejects_broken_manifests(os.path.join(k8s[0]["dir"], "island-0.yaml"))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"checked {len(cases)} cases")


main()
