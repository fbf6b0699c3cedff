#!/usr/bin/env bash
# train.shard = "fsdp" against "ddp" at real widths: each rank's peak RSS and the step time of
# one island of N rank processes (torchrun variables, Gloo on 127.0.0.1) training LoRA on the
# Flux `wide` preset in bf16, ddp and fsdp side by side in one run.
#
#   bench/fsdp_memory_bench.sh [WORK_DIR=/tmp/yeto-fsdp] [STEPS=3] [RANKS="2 3"]
#   REPO=/path/to/flux-wide-bf16 bench/fsdp_memory_bench.sh ...   (reuse a bf16 wide repository)
#
# Time: the island's wall time, loading included. Peak: every rank process's maximum resident set (GNU time's %M: VmHWM, loading, encoding and
# the steps). Bound (fsdp): checkpoint / N x 1.2 + activations + 400 MB, with activations taken
# as ddp's peak minus its checkpoint bytes' share, i.e. what a ddp rank holds beyond 1.0x the
# checkpoint (the same micro batch and encoders on every rank); printed next to each rank.
set -euo pipefail

WORK=${1:-/tmp/yeto-fsdp}
STEPS=${2:-3}
RANKS=${3:-"2 3"}
THREADS=${THREADS:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${YETO_BIN:-$ROOT/build/bin}
mkdir -p "$WORK"

repo() {
  if [[ -n ${REPO:-} ]]; then echo "$REPO"; return; fi
  if [[ ! -f $WORK/flux-wide-bf16/model_index.json ]]; then
    "$BIN/yeto-host" init-model --family flux --preset wide --out "$WORK/flux-wide" --force >/dev/null 2>&1
    "$BIN/io_safetensors_bench" --convert "$WORK/flux-wide" "$WORK/flux-wide-bf16" bf16 >/dev/null 2>&1
    rm -rf "$WORK/flux-wide"
  fi
  echo "$WORK/flux-wide-bf16"
}

dataset() {
  local dir=$WORK/data
  if [[ ! -f $dir/train.jsonl ]]; then
    mkdir -p "$dir"
    : >"$dir/train.jsonl"
    local sources=(testsrc testsrc2 smptebars rgbtestsrc) prompts=("a test pattern" "a colorful test card"
      "vertical color bars" "red green and blue stripes")
    for i in 0 1 2 3 4 5; do
      ffmpeg -hide_banner -loglevel error -y -f lavfi -i "${sources[$((i % 4))]}=size=128x128" -frames:v 1 "$dir/img$i.png"
      printf '{"image": "img%d.png", "prompt": "%s"}\n' "$i" "${prompts[$((i % 4))]}" >>"$dir/train.jsonl"
    done
  fi
  echo "$dir"
}

island() {  # shard ranks run_dir -> "seconds"; writes run_dir.rank<r>.kb
  local shard=$1 n=$2 run=$3 port=$((29500 + RANDOM % 2000))
  cat >"$run.toml" <<EOF
[run]
threads = $THREADS
[model]
id = "$R"
adapter = "flux"
precision = "bf16"
max_sequence_length = 64
[data]
path = "$D/train.jsonl"
height = 128
width = 128
workers = 1
[validation]
split = 0.0
[lora]
r = 16
alpha = 16.0
[train]
shard = "$shard"
max_steps = $STEPS
micro_batch_size = 1
checkpoint_every = 0
[optimizer]
learning_rate = 1e-3
weight_decay = 0.0
warmup_steps = 1
[diffusion]
seed = 11
timestep_sampling = "uniform"
EOF
  rm -rf "$run"
  local t0 t1 pids=() r
  t0=$(date +%s.%N)
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      /usr/bin/time -f "%M" -o "$run.rank$r.kb" "$BIN/yeto-host" train --config "$run.toml" --output "$run" \
      >"$run.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || { echo "train failed: $run.rank*.log" >&2; tail -20 "$run".rank*.log >&2; exit 1; }
  done
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}

R=$(repo)
D=$(dataset)
bytes=$(find "$R" -name '*.safetensors' -printf '%s\n' | awk '{s += $1} END {print s}')
tbytes=$(find "$R/transformer" -name '*.safetensors' -printf '%s\n' | awk '{s += $1} END {print s}')
echo "Flux wide bf16: checkpoint $(echo "scale=3; $bytes / 1000000000" | bc) GB (transformer $(echo "scale=3; $tbytes / 1000000000" | bc) GB);" \
  "$STEPS LoRA steps, micro batch 1 per rank, 128 x 128, $THREADS thread(s) per rank"
echo "bound (fsdp) = checkpoint / N x 1.2 + activations + 400 MB, where activations = the same rank's ddp peak" \
  "minus the checkpoint's bytes: what a ddp rank holds beyond the whole checkpoint (the encoders' and the" \
  "denoiser's activations, LoRA, its gradients and AdamW state, the runtime's own memory)"
printf '%-5s %5s %12s %s\n' shard ranks "island s" "peak GB per rank (fsdp: bound)"
for n in $RANKS; do
  declare -A peak_ddp=()
  for shard in ddp fsdp; do
    run=$WORK/run-$shard-$n
    secs=$(island $shard "$n" "$run")
    line=""
    worst_ddp=0
    for ((r = 0; r < n; r++)); do
      kb=$(cat "$run.rank$r.kb")
      gb=$(echo "scale=3; $kb * 1024 / 1000000000" | bc)
      if [[ $shard == ddp ]]; then
        peak_ddp[$r]=$kb
        line+=" r$r $gb"
      else
        # activations and the rest beyond the whole checkpoint, as the ddp rank measured them
        act=$(echo "scale=0; ${peak_ddp[$r]} * 1024 - $bytes" | bc)
        bound=$(echo "scale=3; ($bytes / $n * 1.2 + $act + 400000000) / 1000000000" | bc)
        verdict=$(echo "$kb * 1024 <= ($bytes / $n * 1.2 + $act + 400000000)" | bc)
        line+=" r$r $gb ($bound $([[ $verdict == 1 ]] && echo met || echo MISSED))"
      fi
    done
    printf '%-5s %5s %12.1f%s\n' "$shard" "$n" "$secs" "$line"
  done
  cmp -s "$WORK/run-ddp-$n/lora.safetensors" "$WORK/run-fsdp-$n/lora.safetensors" &&
    echo "  $n ranks: fsdp's lora.safetensors is byte-identical to ddp's" ||
    echo "  $n ranks: fsdp's lora.safetensors DIFFERS from ddp's"
  grep -h "keeps .* blocks as shards" "$WORK"/run-fsdp-$n.rank*.log | sed 's/^.*train.shard/  train.shard/' || true
done
