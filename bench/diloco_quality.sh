#!/usr/bin/env bash
# DiLoCo against synchronous training on equal samples: the same model, data, seed and total
# samples trained
#   sync     one island of 2 ranks (ddp: gradients all-reduced every step), STEPS steps
#   diloco2  2 islands of 1 rank (`train --islands 2`, H = sync.inner_steps), STEPS steps each
#   diloco4  4 islands of 1 rank, STEPS/2 steps each
# and evaluated on the same held-out rows (validation.split of the data) with the same noise:
# the sync arm's val_loss after its last step (the mean of its two ranks, whose noise streams are
# those of logical ranks 0 and 1), each DiLoCo arm's on the syncer's final cut
# (val_loss_final_cut, the mean of islands 0 and 1: the same two streams). The noise stream alone
# moves a val_loss by a few percent on a handful of rows, so arms compared on other streams
# would measure the streams. Prints per seed and arm the val_loss, its ratio to the sync
# arm's and the bytes the islands sent and received (both ways, the learners' own socket
# counters) next to what a float32 ring all-reduce of the same P trainable values every step
# would have moved (summary.json's figure: each of the N islands a rank, 2(N-1)/N x 4P bytes sent
# and as many received per step, checked here against the islands' steps; for diloco4 also the
# sync arm's own two-rank ring over the same samples), and the merges that held every live
# island; then the mean and spread over seeds, and per DiLoCo run the bytes per island and the
# `init` uploads on the syncer's tape (`init` and `init_ignored` events: each is one upload of
# the initial state).
#
#   bench/diloco_quality.sh BUILD_DIR [OUT_DIR]
#   PRESET=mid bench/diloco_quality.sh build build/dq-mid     # the Flux mid preset, the product's H
#
# Environment (defaults in brackets): MODEL (a Diffusers repository, e.g. a real checkpoint) or
# PRESET (an init-model preset of FAMILY [flux], written once into OUT_DIR/FAMILY-PRESET with
# `yeto-host init-model --seed MODEL_SEED [0]`: random weights, but the same bytes for the same
# seed, so every arm and every rerun starts from one base; a random base is fine for comparing
# arms at equal samples) [MODEL: tests/fixtures/repos/flux-tiny when PRESET is unset], DATA [the
# demo's image set, generated], SEEDS ["1 2 3"], STEPS [640: per island of diloco2 and per rank of
# sync; diloco4's islands run STEPS/2], H [unset: sync.inner_steps as configured, 64 by default]
# (inner steps; several, e.g. H="1 16 64", run each DiLoCo arm once per H against the one sync
# arm and print the frontier: loss cost and bytes per H), FRAGMENTS [unset: sync.fragments, 1 by default], MICRO [2], LR [2e-3], SIZE [32],
# LORA_R [4], TEXT_TOKENS [32] (model.max_sequence_length, as the demo; 0 is the family's default,
# 512 for FLUX.1, which made a mid step at 32x32 about 12x as long), ARMS ["sync diloco2 diloco4"],
# DRAWS [16] (validation.draws: timestep / noise draws per held-out row; the held-out set is a
# few rows, and one draw's loss moves with its timestep more than the arms differ),
# EXTRA (more `--set KEY=VALUE` for every arm), SUMMARY_ONLY [unset; 1: only print the tables
# of the runs already in OUT_DIR, with the same settings]. STEPS 640 at H 64 is 10 outer steps:
# long enough for the whole-run bytes of diloco2 to pass 400x a float32 ring all-reduce when
# every merge holds both islands (docs/BENCHMARKS.md, "400x both ways": ratio_run ~ 8S /
# (1.125 S/H + c), c ~ 1 for one `init` upload of a LoRA whose B halves are zero; a merge of one
# island sends an update to both and costs the ratio). Results on the Flux mid preset (a run
# took 22 minutes per seed for the 3 arms on the shared 2-core machine at load 10-16) and the
# tiny-Flux history (the family default text length, H given) are in docs/BENCHMARKS.md, "DiLoCo against
# synchronous training".
# On real GPUs point MODEL at the checkpoint, DATA at a fixed-shape media set, STEPS at the budget,
# and run the arms with the same hardware per arm (docs/BENCHMARKS.md).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: diloco_quality.sh BUILD_DIR [OUT_DIR]}"
out="${2:-$build/diloco-quality}"
host="$build/bin/yeto-host"
family="${FAMILY:-flux}"
seeds="${SEEDS:-1 2 3}"
steps="${STEPS:-640}"
arms="${ARMS:-sync diloco2 diloco4}"
text_tokens="${TEXT_TOKENS:-32}"
micro="${MICRO:-2}"
lr="${LR:-2e-3}"
draws="${DRAWS:-16}"
size="${SIZE:-32}"
rank="${LORA_R:-4}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # run.toml names paths that the config resolves against its own folder
if [ -n "${MODEL:-}" ]; then
  model="$MODEL"
elif [ -n "${PRESET:-}" ]; then
  model="$out/$family-$PRESET"
  # Written once: a later run in the same OUT_DIR reuses it (the same seed gives the same bytes).
  if [ ! -f "$model/model_index.json" ]; then
    "$host" init-model --family "$family" --preset "$PRESET" --seed "${MODEL_SEED:-0}" --out "$model" --force \
      > "$out/init-model.log" 2>&1 || { cat "$out/init-model.log" >&2; exit 1; }
  fi
else
  model="$here/tests/fixtures/repos/flux-tiny"
fi
if [ -z "${DATA:-}" ]; then
  bash "$here/scripts/demo_data.sh" "$out/data" > /dev/null
  data="$out/data/train.jsonl"
else
  data="$DATA"
fi
cat > "$out/run.toml" <<TOML
[run]
threads = 1
[model]
id = "$model"
precision = "fp32"
max_sequence_length = $text_tokens
[data]
path = "$data"
height = $size
width = $size
workers = 1
[validation]
split = 0.25
max_rows = 64
draws = $draws
[lora]
r = $rank
alpha = $rank.0
[train]
micro_batch_size = $micro
checkpoint_every = 0
[optimizer]
learning_rate = $lr
warmup_steps = 2
TOML
# H and fragments: the product's defaults unless H / FRAGMENTS say otherwise. Several H values
# (H="1 16 64") run every DiLoCo arm once per H against the same sync arm: the frontier of H
# against the loss cost and the bytes.
read -r -a hs <<< "${H:-}"
for h in "${hs[@]}"; do
  [[ "$h" =~ ^[1-9][0-9]*$ ]] || { echo "H: '$h' is not a positive number of inner steps" >&2; exit 2; }
done
if [ ${#hs[@]} -gt 1 ]; then
  case " ${EXTRA:-} " in *" sync.inner_steps="*) echo "H lists several values: leave sync.inner_steps out of EXTRA" >&2; exit 2 ;; esac
fi
[ ${#hs[@]} -eq 1 ] && printf '[sync]\ninner_steps = %s\n' "${hs[0]}" >> "$out/run.toml"
[ -n "${FRAGMENTS:-}" ] && { grep -q '^\[sync\]' "$out/run.toml" || echo '[sync]' >> "$out/run.toml"; \
  echo "fragments = $FRAGMENTS" >> "$out/run.toml"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
extra=()
for kv in ${EXTRA:-}; do extra+=(--set "$kv"); done
# The H values and fragments the DiLoCo arms run with, as the configuration resolves them (EXTRA
# included). With one H (or none) the runs are OUT_DIR/dilocoN-SEED, with several
# OUT_DIR/dilocoN-hH-SEED.
resolve() {
  "$host" config --json --config "$out/run.toml" "${extra[@]}" "$@" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j["sync.inner_steps"]["value"], j["sync.fragments"]["value"])'
}
if [ ${#hs[@]} -gt 1 ]; then
  inners=()
  for h in "${hs[@]}"; do read -r inner fragments < <(resolve --set "sync.inner_steps=$h"); inners+=("$inner"); done
else
  read -r inner fragments < <(resolve)
  inners=("$inner")
fi
run_name() {  # arm, H, seed
  if [ ${#inners[@]} -gt 1 ]; then echo "$1-h$2-$3"; else echo "$1-$3"; fi
}
has() { case " $arms " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# SUMMARY_ONLY=1: only print the tables of the runs already in OUT_DIR.
if [ -z "${SUMMARY_ONLY:-}" ]; then
  for seed in $seeds; do
    common=(--config "$out/run.toml" --set "diffusion.seed=$seed" "${extra[@]}")
    # sync: two ranks of one island, torchrun-style.
    if has sync; then
      dir="$out/sync-$seed"
      rm -rf "$dir"
      port=$(free_port)
      pids=()
      for r in 0 1; do
        RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          "$host" train "${common[@]}" --set train.shard=ddp --set train.island_ranks=2 --max-steps "$steps" \
          --output "$dir" --quiet > "$out/sync-$seed.rank$r.log" 2>&1 &
        pids+=($!)
      done
      for r in 0 1; do
        wait "${pids[$r]}" || { tail -5 "$out/sync-$seed.rank$r.log" >&2; exit 1; }
      done
      echo "$(date -u +%T) seed $seed sync done" >&2
    fi
    # A finished run directory would be resumed (its syncer restarts on the final cut): start fresh.
    for h in "${inners[@]}"; do
      hset=()
      [ ${#inners[@]} -gt 1 ] && hset=(--set "sync.inner_steps=$h")
      for n in 2 4; do
        has "diloco$n" || continue
        name="$(run_name "diloco$n" "$h" "$seed")"
        rm -rf "${out:?}/$name"
        "$host" train --islands "$n" "${common[@]}" "${hset[@]}" --max-steps $((steps * 2 / n)) --output "$out/$name" \
          --quiet > "$out/$name.log" 2>&1 || { tail -5 "$out/$name.log" >&2; exit 1; }
        echo "$(date -u +%T) seed $seed $name done (H $h)" >&2
      done
    done
  done
fi

python3 - "$out" "$seeds" "$steps" "${inners[*]}" "$fragments" "$arms" "$draws" <<'PY'
import json, statistics, sys, os
out, seeds, steps, fragments = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), int(sys.argv[5])
inners = [int(h) for h in sys.argv[4].split()]
arms = sys.argv[6].split()
draws = int(sys.argv[7])

def records(path):
    return [json.loads(line) for line in open(path) if line.strip()]

def last_or_none(path, key):
    v = None
    for j in records(path):
        if key in j:
            v = j[key]
    return v

def last(path, key):
    v = last_or_none(path, key)
    if v is None:
        raise SystemExit(f"{path}: no {key}")
    return v

def tape(d):
    # The syncer's tape, rotated parts first (tape.N.jsonl, the oldest has the highest N).
    base = os.path.join(d, "syncer", "tape.jsonl")
    parts, n = [], 1
    while os.path.exists(os.path.join(d, "syncer", f"tape.{n}.jsonl")):
        parts.insert(0, os.path.join(d, "syncer", f"tape.{n}.jsonl"))
        n += 1
    return [r for p in parts + [base] for r in records(p)]

rows, notes = {}, []
numel = None
multi = len(inners) > 1
for seed in seeds:
    s = None
    if "sync" in arms:
        s = last(os.path.join(out, f"sync-{seed}", "metrics.jsonl"), "val_loss")
        se = last_or_none(os.path.join(out, f"sync-{seed}", "metrics.jsonl"), "val_loss_stderr")
        rows.setdefault(("sync", None), []).append((s, 1.0, None, None, None, se))
    for h in inners:
        for arm in ("diloco2", "diloco4"):
            if arm not in arms:
                continue
            d = os.path.join(out, f"{arm}-h{h}-{seed}" if multi else f"{arm}-{seed}")
            # Every island holds the final cut; islands 0 and 1 evaluate it with the noise streams
            # of logical ranks 0 and 1, the streams the sync arm's two ranks average over.
            v = statistics.mean(last(os.path.join(d, f"island-{i}", "metrics.jsonl"), "val_loss_final_cut") for i in (0, 1))
            ses = [last_or_none(os.path.join(d, f"island-{i}", "metrics.jsonl"), "val_loss_final_cut_stderr") for i in (0, 1)]
            se = (ses[0] ** 2 + ses[1] ** 2) ** 0.5 / 2 if None not in ses else None
            summ = json.load(open(os.path.join(d, "summary.json")))
            n = summ["islands"]
            merged = (summ["merges_with_every_live_island"], summ["outer_steps_merged"])
            per = summ["per_island"]
            numel = per[0]["numel"]
            isteps = [i["steps"] for i in per]
            # The summary's all-reduce figure: every island a rank of one float32 ring all-reduce
            # of the numel trainable values each of its steps, 2(n-1)/n x 4 x numel bytes sent and
            # as many received per step. Recomputed here from the islands' steps as a check.
            ar = summ["allreduce_equivalent_bytes_total"]
            ar_check = sum(st * 2 * 2 * (n - 1) / n * 4 * numel for st in isteps)
            if abs(ar - ar_check) > 1e-6 * ar:
                raise SystemExit(f"{d}: allreduce_equivalent_bytes_total {ar} is not {ar_check}")
            # The sync arm's own ring (2 ranks, STEPS steps each) for the same samples.
            ar_sync = 2 * steps * 2 * 2 * (2 - 1) / 2 * 4 * numel
            ev = [r.get("event") for r in tape(d)]
            inits = ev.count("init") + ev.count("init_ignored")
            sent = "+".join(f'{i["bytes_sent"] / 1e6:.3f}' for i in per)
            recv = "+".join(f'{i["bytes_received"] / 1e6:.3f}' for i in per)
            notes.append(f"{arm} H {h} seed {seed}: islands' steps {isteps}, sent {sent} MB, received {recv} MB, "
                         f"init uploads on the tape {inits} (init {ev.count('init')}, init_ignored {ev.count('init_ignored')}), "
                         f"merges by islands {summ['merges_by_islands']}, sync arm's ring {ar_sync:.4g} B = {ar_sync / summ['bytes_total']:.1f}x")
            rows.setdefault((arm, h), []).append((v, v / s if s else float("nan"), summ["bytes_total"], ar, merged, se))
print(f"DiLoCo vs synchronous training, {len(seeds)} seeds, {steps} steps x 2 ranks of samples per arm, "
      f"H = {' / '.join(map(str, inners))}, fragments = {fragments}, {numel} trainable values, "
      f"{draws} validation draws per held-out row")
print("| arm | H | seed | val_loss | / sync | bytes both ways | all-reduce bytes | all-reduce / arm | merges with every live island | val_loss standard error (draws) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (arm, h), rs in rows.items():
    for seed, (v, ratio, b, ar, merged, se) in zip(seeds, rs):
        extra = "| | | | |" if b is None else f"| {b:.4g} | {ar:.4g} | {ar / b:.1f}x | {merged[0]}/{merged[1]} |"
        print(f"| {arm} | {'' if h is None else h} | {seed} | {v:.5f} | {ratio:.4f} {extra} {'' if se is None else f'{se:.5f}'} |")
print()
# Over the seeds; with several H this is the frontier: the loss cost against the bytes saved.
print("| arm | H | mean val_loss | spread (stdev) | mean / sync | best / sync | worst / sync | all-reduce / arm (mean) | merges with every live island |")
print("|---|---|---|---|---|---|---|---|---|")
for (arm, h), rs in rows.items():
    vals = [r[0] for r in rs]
    ratios = [r[1] for r in rs]
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    if h is None:
        tail = "| | |"
    else:
        tail = (f"| {statistics.mean(r[3] / r[2] for r in rs):.1f}x | "
                f"{sum(r[4][0] for r in rs)}/{sum(r[4][1] for r in rs)} |")
    print(f"| {arm} | {'' if h is None else h} | {statistics.mean(vals):.5f} | {sd:.5f} | {statistics.mean(ratios):.4f} | "
          f"{min(ratios):.4f} | {max(ratios):.4f} {tail}")
print()
for line in notes:
    print(line)
PY
