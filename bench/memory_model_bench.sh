#!/usr/bin/env bash
# The memory model (`yeto-host inspect --memory`) against the measured peak RSS of short LoRA
# runs (`yeto-host train`, metrics.jsonl's peak_rss_mb: the process's VmHWM, loading, encoding
# and the steps), side by side in one run.
#
#   bench/memory_model_bench.sh [WORK_DIR=/tmp/yeto-memory] [STEPS=2] [THREADS=1]
#   CASES="flux:tiny:64:1 wan:mid:128:9" bench/memory_model_bench.sh ...   (family:preset:pixels:frames)
#   VARIANTS="bf16 fp8 bf16+ckpt fp8+ckpt" (default)
#
# For each case: writes the preset's repository (`yeto-host init-model`, converted to bf16 with
# io_safetensors_bench --convert when that tool is built), a dataset of 4 images (or clips) made
# with the ffmpeg CLI, trains STEPS LoRA steps (r 16, micro batch 1, bf16 compute) per variant,
# and prints the estimate, the measured peak and their ratio. The acceptance: within 20 %.
set -euo pipefail

WORK=${1:-/tmp/yeto-memory}
STEPS=${2:-2}
THREADS=${3:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${YETO_BIN:-$ROOT/build/bin}
CASES=${CASES:-"flux:tiny:64:1 flux:mid:256:1 flux:wide:128:1 wan:tiny:64:9 wan:mid:128:9 wan:wide:128:9"}
VARIANTS=${VARIANTS:-"bf16 fp8 bf16+ckpt fp8+ckpt"}
mkdir -p "$WORK"

repo() {  # family preset -> repository (bf16 where the converter is built)
  local family=$1 preset=$2 out=$WORK/$1-$2
  if [[ ! -f $out/model_index.json ]]; then
    "$BIN/yeto-host" init-model --family "$family" --preset "$preset" --out "$out.tmp" --force >/dev/null 2>&1
    if [[ -x $BIN/io_safetensors_bench ]]; then
      "$BIN/io_safetensors_bench" --convert "$out.tmp" "$out" bf16 >/dev/null 2>&1
      rm -rf "$out.tmp"
    else
      mv "$out.tmp" "$out"
    fi
  fi
  echo "$out"
}

dataset() {  # family pixels frames -> data directory
  local family=$1 px=$2 frames=$3 dir=$WORK/data-$1-$2-$3
  if [[ ! -f $dir/train.jsonl ]]; then
    mkdir -p "$dir"
    : >"$dir/train.jsonl"
    local sources=(testsrc testsrc2 smptebars rgbtestsrc)
    for i in 0 1 2 3; do
      if [[ $frames == 1 ]]; then
        ffmpeg -hide_banner -loglevel error -y -f lavfi -i "${sources[$i]}=size=${px}x${px}" -frames:v 1 "$dir/m$i.png"
        printf '{"image": "m%d.png", "prompt": "a test pattern %d"}\n' "$i" "$i" >>"$dir/train.jsonl"
      else
        ffmpeg -hide_banner -loglevel error -y -f lavfi -i "${sources[$i]}=size=${px}x${px}:rate=8" -t 2 \
          -c:v libx264 -pix_fmt yuv420p "$dir/m$i.mp4"
        printf '{"video": "m%d.mp4", "prompt": "a test pattern %d"}\n' "$i" "$i" >>"$dir/train.jsonl"
      fi
    done
  fi
  echo "$dir"
}

config() {  # family repo data px frames storage ckpt -> toml text
  local family=$1 repo=$2 data=$3 px=$4 frames=$5 storage=$6 ckpt=$7
  cat <<EOT
[run]
threads = $THREADS
[model]
id = "$repo"
adapter = "$family"
precision = "bf16"
storage = "$storage"
max_sequence_length = 64
[data]
path = "$data/train.jsonl"
height = $px
width = $px
num_frames = $frames
fps = 8.0
workers = 1
[validation]
split = 0.0
[lora]
r = 16
alpha = 16.0
[train]
max_steps = $STEPS
micro_batch_size = 1
checkpoint_every = 0
activation_checkpointing = $ckpt
[optimizer]
learning_rate = 1e-3
[diffusion]
seed = 11
EOT
}

printf '%-5s %-5s %-6s %-6s %-10s %12s %12s %8s %s\n' model preset pixels frames variant "estimate MB" "peak MB" ratio verdict
for c in $CASES; do
  IFS=: read -r family preset px frames <<<"$c"
  r=$(repo "$family" "$preset")
  d=$(dataset "$family" "$px" "$frames")
  for v in $VARIANTS; do
    storage=auto ckpt=false
    [[ $v == fp8* ]] && storage=fp8
    [[ $v == *ckpt ]] && ckpt=true
    run=$WORK/run-$family-$preset-$v
    config "$family" "$r" "$d" "$px" "$frames" "$storage" "$ckpt" >"$run.toml"
    est=$("$BIN/yeto-host" inspect --memory --json --config "$run.toml" 2>/dev/null | jq '.host_bytes / 1048576')
    rm -rf "$run"
    "$BIN/yeto-host" train --config "$run.toml" --output "$run" >"$run.log" 2>&1 || {
      echo "train failed: $run.log" >&2
      tail -20 "$run.log" >&2
      exit 1
    }
    peak=$(jq -s 'map(.peak_rss_mb // 0) | max' "$run/metrics.jsonl")
    awk -v f="$family" -v p="$preset" -v px="$px" -v fr="$frames" -v v="$v" -v e="$est" -v m="$peak" 'BEGIN {
      r = e / m; printf "%-5s %-5s %-6s %-6s %-10s %12.0f %12.0f %8.2f %s\n", f, p, px, fr, v, e, m, r,
        (r >= 0.8 && r <= 1.2) ? "within 20%" : "OFF" }'
  done
done
