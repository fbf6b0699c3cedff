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
# arm's and the bytes the islands sent and received (both ways) next to what a float32 ring
# all-reduce of the same trainable tensors would have moved, and the merges that held every live
# island; then the mean and spread over seeds.
#
#   bench/diloco_quality.sh BUILD_DIR [OUT_DIR]
#
# Environment (defaults in brackets): MODEL [tests/fixtures/repos/flux-tiny] (a Diffusers
# repository, or an init-model preset written with `yeto-host init-model`), DATA [the demo's
# image set, generated], SEEDS ["1 2 3"], STEPS [80], H [10] (inner steps), MICRO [2], LR [2e-3],
# SIZE [32], LORA_R [4], EXTRA (more `--set KEY=VALUE` for every arm). On real GPUs point MODEL at
# the checkpoint, DATA at a fixed-shape media set, STEPS at the budget, and run the arms with the
# same hardware per arm (docs/BENCHMARKS.md).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: diloco_quality.sh BUILD_DIR [OUT_DIR]}"
out="${2:-$build/diloco-quality}"
host="$build/bin/yeto-host"
model="${MODEL:-$here/tests/fixtures/repos/flux-tiny}"
seeds="${SEEDS:-1 2 3}"
steps="${STEPS:-80}"
inner="${H:-10}"
micro="${MICRO:-2}"
lr="${LR:-2e-3}"
size="${SIZE:-32}"
rank="${LORA_R:-4}"
mkdir -p "$out"
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
[data]
path = "$data"
height = $size
width = $size
workers = 1
[validation]
split = 0.25
max_rows = 64
[lora]
r = $rank
alpha = $rank.0
[train]
micro_batch_size = $micro
checkpoint_every = 0
[optimizer]
learning_rate = $lr
warmup_steps = 2
[sync]
inner_steps = $inner
TOML

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
extra=()
for kv in ${EXTRA:-}; do extra+=(--set "$kv"); done

for seed in $seeds; do
  common=(--config "$out/run.toml" --set "diffusion.seed=$seed" "${extra[@]}")
  # sync: two ranks of one island, torchrun-style.
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
  for p in "${pids[@]}"; do wait "$p"; done
  # A finished run directory would be resumed (its syncer restarts on the final cut): start fresh.
  rm -rf "$out/diloco2-$seed" "$out/diloco4-$seed"
  "$host" train --islands 2 "${common[@]}" --max-steps "$steps" --output "$out/diloco2-$seed" --quiet \
    > "$out/diloco2-$seed.log" 2>&1
  "$host" train --islands 4 "${common[@]}" --max-steps $((steps / 2)) --output "$out/diloco4-$seed" --quiet \
    > "$out/diloco4-$seed.log" 2>&1
  echo "seed $seed done" >&2
done

python3 - "$out" "$seeds" "$steps" "$inner" <<'PY'
import json, statistics, sys, os
out, seeds, steps, inner = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), int(sys.argv[4])

def last(path, key):
    v = None
    for line in open(path):
        j = json.loads(line)
        if key in j:
            v = j[key]
    if v is None:
        raise SystemExit(f"{path}: no {key}")
    return v

rows = {}
for seed in seeds:
    s = last(os.path.join(out, f"sync-{seed}", "metrics.jsonl"), "val_loss")
    rows.setdefault("sync", []).append((s, 1.0, None, None, None))
    for arm in ("diloco2", "diloco4"):
        d = os.path.join(out, f"{arm}-{seed}")
        # Every island holds the final cut; islands 0 and 1 evaluate it with the noise streams of
        # logical ranks 0 and 1, the streams the sync arm's two ranks average over.
        v = statistics.mean(last(os.path.join(d, f"island-{i}", "metrics.jsonl"), "val_loss_final_cut") for i in (0, 1))
        summ = json.load(open(os.path.join(d, "summary.json")))
        part = f'{summ["merges_with_every_live_island"]}/{summ["outer_steps_merged"]}'
        rows.setdefault(arm, []).append((v, v / s, summ["bytes_total"], summ["allreduce_equivalent_bytes_total"], part))
print(f"DiLoCo vs synchronous training, {len(seeds)} seeds, {steps} steps x 2 ranks of samples per arm, H = {inner}")
print("| arm | seed | val_loss | / sync | bytes both ways | all-reduce bytes | all-reduce / arm | merges with every live island |")
print("|---|---|---|---|---|---|---|---|")
for arm, rs in rows.items():
    for seed, (v, ratio, b, ar, part) in zip(seeds, rs):
        extra = "| | | |" if b is None else f"| {b:.3g} | {ar:.3g} | {ar / b:.1f}x | {part} |"
        print(f"| {arm} | {seed} | {v:.5f} | {ratio:.4f} {extra}")
print()
print("| arm | mean val_loss | spread (stdev) | mean / sync | worst / sync |")
print("|---|---|---|---|---|")
for arm, rs in rows.items():
    vals = [r[0] for r in rs]
    ratios = [r[1] for r in rs]
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    print(f"| {arm} | {statistics.mean(vals):.5f} | {sd:.5f} | {statistics.mean(ratios):.4f} | {max(ratios):.4f} |")
PY
