#!/usr/bin/env bash
# LoRA training at real widths: peak RSS against the checkpoint's bytes and fp8 storage's loss
# against the bf16 run, measured side by side in one run with `yeto-host train`.
#
#   bench/wide_training_bench.sh [WORK_DIR=/tmp/yeto-wide] [FLUX_STEPS=20] [WAN_STEPS=3] [THREADS=1]
#   FAMILIES="wan" bench/wide_training_bench.sh ...   (a subset; default "flux wan")
#
# For Flux `wide` (FLUX.1 widths, 687 M transformer parameters; 4 images at 128 x 128) and Wan 2.1
# `wide` (Wan 2.1 14B widths, 584 M; 4 clips of 9 frames at 128 x 128): writes the repository with
# `yeto-host init-model`, converts it to bf16 (`io_safetensors_bench --convert`), then trains
# LoRA (r 16, micro batch 1) twice from the same seed, `model.precision = bf16` with bf16 storage
# and with `model.storage = fp8` (FLUX_STEPS / WAN_STEPS steps). Prints each run's wall time, peak RSS (metrics.jsonl's peak_rss_mb: the
# process's VmHWM) against the bf16 checkpoint's bytes with the acceptance bounds (bf16: 1.15 x
# checkpoint + 400 MB; fp8: 0.65 x checkpoint + 400 MB), and the fp8 run's per-step loss against
# the bf16 run's (largest relative difference of one step, and of the mean over all steps).
set -euo pipefail

WORK=${1:-/tmp/yeto-wide}
FLUX_STEPS=${2:-20}
WAN_STEPS=${3:-3}
THREADS=${4:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${YETO_BIN:-$ROOT/build/bin}
mkdir -p "$WORK"

repo() {  # family -> bf16 repository
  local family=$1
  if [[ ! -f $WORK/$family-wide-bf16/model_index.json ]]; then
    "$BIN/yeto-host" init-model --family "$family" --preset wide --out "$WORK/$family-wide" --force >/dev/null 2>&1
    "$BIN/io_safetensors_bench" --convert "$WORK/$family-wide" "$WORK/$family-wide-bf16" bf16 >/dev/null 2>&1
    rm -rf "$WORK/$family-wide"
  fi
  echo "$WORK/$family-wide-bf16"
}

dataset() {  # family -> data directory (train.jsonl and media made with the ffmpeg CLI)
  local family=$1 dir=$WORK/data-$1
  if [[ ! -f $dir/train.jsonl ]]; then
    mkdir -p "$dir"
    : >"$dir/train.jsonl"
    local sources=(testsrc testsrc2 smptebars rgbtestsrc) prompts=("a test pattern" "a colorful test card"
      "vertical color bars" "red green and blue stripes")
    for i in 0 1 2 3; do
      if [[ $family == flux ]]; then
        ffmpeg -hide_banner -loglevel error -y -f lavfi -i "${sources[$i]}=size=128x128" -frames:v 1 "$dir/img$i.png"
        printf '{"image": "img%d.png", "prompt": "%s"}\n' "$i" "${prompts[$i]}" >>"$dir/train.jsonl"
      else
        ffmpeg -hide_banner -loglevel error -y -f lavfi -i "${sources[$i]}=size=128x128:rate=8" -t 2 \
          -c:v libx264 -pix_fmt yuv420p "$dir/clip$i.mp4"
        printf '{"video": "clip%d.mp4", "prompt": "%s"}\n' "$i" "${prompts[$i]}" >>"$dir/train.jsonl"
      fi
    done
  fi
  echo "$dir"
}

train() {  # family repo data storage run_dir steps -> "seconds"
  local family=$1 repo=$2 data=$3 storage=$4 run=$5 steps=$6 media
  if [[ $family == flux ]]; then media='height = 128
width = 128'; else media='height = 128
width = 128
num_frames = 9
fps = 8.0'; fi
  cat >"$run.toml" <<EOF
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
$media
workers = 1
[validation]
split = 0.0
[lora]
r = 16
alpha = 16.0
[train]
max_steps = $steps
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
  local t0 t1
  t0=$(date +%s.%N)
  "$BIN/yeto-host" train --config "$run.toml" --output "$run" >"$run.log" 2>&1 || {
    echo "train failed: $run.log" >&2
    tail -20 "$run.log" >&2
    exit 1
  }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}

losses() { jq -r 'select(.loss != null) | .loss' "$1/metrics.jsonl"; }
peak_mb() { jq -s 'map(.peak_rss_mb // 0) | max' "$1/metrics.jsonl"; }

echo "LoRA training at real widths (Flux $FLUX_STEPS steps, Wan $WAN_STEPS steps), bf16 compute, $THREADS thread(s);"
echo "peak: metrics.jsonl peak_rss_mb (VmHWM); time: the whole yeto-host train process"
printf '%-5s %-7s %9s %11s %10s %10s %14s %s\n' model storage "time s" "ckpt GB" "peak GB" "peak/ckpt" "bound GB" verdict
for family in ${FAMILIES:-flux wan}; do
  r=$(repo $family)
  d=$(dataset $family)
  bytes=$(find "$r" -name '*.safetensors' -printf '%s\n' | awk '{s += $1} END {print s}')
  steps=$FLUX_STEPS
  [[ $family == wan ]] && steps=$WAN_STEPS
  for storage in auto fp8; do
    secs=$(train $family "$r" "$d" $storage "$WORK/run-$family-$storage" "$steps")
    peak=$(peak_mb "$WORK/run-$family-$storage")
    awk -v f=$family -v s=$storage -v t="$secs" -v b="$bytes" -v p="$peak" 'BEGIN {
      gb = b / 1e9; pk = p * 1048576 / 1e9; k = (s == "fp8") ? 0.65 : 1.15; bound = k * gb + 0.4
      printf "%-5s %-7s %9.1f %11.3f %10.3f %9.2fx %14s %s\n", f, (s == "auto" ? "bf16" : s), t, gb, pk, pk / gb,
             sprintf("%.2fx+0.4=%.3f", k, bound), (pk <= bound ? "met" : "MISSED") }'
  done
  paste <(losses "$WORK/run-$family-auto") <(losses "$WORK/run-$family-fp8") | awk -v f=$family '
    { n++; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > worst) { worst = d; at = n } sa += $1; sb += $2 }
    END { m = (sb - sa) / sa; if (m < 0) m = -m
          printf "%-5s fp8 vs bf16 loss over %d steps: largest per-step difference %.2f%% (step %d), mean %.4f vs %.4f (%.2f%%)\n",
                 f, n, 100 * worst, at, sb / n, sa / n, 100 * m }'
done
