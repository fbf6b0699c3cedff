#!/usr/bin/env bash
# The demo: the main job of yeto-host, end to end on CPU. Called by `make demo` after the
# build; everything it writes lands in demo-output/.
#
#   1. the build's identity and the signed plugins it ships
#   2. a tiny FLUX.1-layout repository created with init-model (seeded random weights,
#      generated tokenizers), inspected
#   3. this build checked against recorded upstream outputs, including a complete FluxPipeline
#      generation (tokens, embeddings, every step, the decoded image)
#   4. a generated captioned image dataset (train + held-out), validated as training decodes it
#   5. the embedded local mode: one syncer and two learner islands as child processes,
#      DiLoCo fragment synchronisation over loopback, TensorBoard logs in the run directory
#   6. the syncer's final cut exported as a Diffusers + PEFT adapter directory
#   7. a grid of images sampled from base + adapter
#   8. a summary: val_loss at start and end, outer steps merged, traffic both ways vs all-reduce,
#      the run report (plots and the validation renders over time)
set -euo pipefail
build_dir="${1:-build}"
root="$(cd "$(dirname "$0")/.." && pwd)"
host="$root/$build_dir/bin/yeto-host"
fixtures="$root/tests/fixtures"
out="$root/demo-output"
rm -rf "$out"
mkdir -p "$out/data"
t0=$(date +%s)

step() { printf '\n== [%ss] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }

step "yeto-host version"
"$host" version

step "signed plugins of this build (manifests and signatures only)"
"$host" plugins list

step "a tiny FLUX.1-layout repository from the flux plugin's 'tiny' preset"
"$host" init-model --family flux --preset tiny --seed 7 --out "$out/flux-tiny"
"$host" inspect "$out/flux-tiny" --diffusion-adapter flux > "$out/inspect-flux-tiny.txt"
grep -E "^(pipeline|components|  [a-z_0-9]+ )" "$out/inspect-flux-tiny.txt" | head -n 12 || true

step "parity against recorded upstream outputs (components, schedulers, tokenizers, the FluxPipeline run)"
cases=()
for c in "$fixtures"/parity/scheduler-flow-match-* "$fixtures"/parity/clip-tokenizer \
         "$fixtures"/parity/sentencepiece-tokenizer "$fixtures"/parity/clip-text "$fixtures"/parity/t5-encoder-* \
         "$fixtures"/parity/vae-kl-16ch "$fixtures"/parity/flux-transformer "$fixtures"/repos/flux-tiny-reference; do
  [ -f "$c/case.json" ] && cases+=("$c")
done
"$host" check-parity "${cases[@]}" > "$out/parity.txt"
grep -E "^(case|summary)" "$out/parity.txt" || tail -n 3 "$out/parity.txt"

step "a generated captioned dataset: coloured shapes on coloured backgrounds"
colours=(red green blue yellow white black orange purple)
make_image() {  # file background shape colour
  local geom
  case "$3" in
    square) geom="drawbox=x=16:y=16:w=32:h=32:color=$4:t=fill" ;;
    bar) geom="drawbox=x=0:y=24:w=64:h=16:color=$4:t=fill" ;;
    column) geom="drawbox=x=24:y=0:w=16:h=64:color=$4:t=fill" ;;
  esac
  ffmpeg -hide_banner -loglevel error -y -f lavfi -i "color=c=$2:s=64x64" -vf "$geom" -frames:v 1 "$1"
}
: > "$out/data/train.jsonl"
: > "$out/data/val.jsonl"
n=0
for shape in square bar column; do
  for i in 0 1 2 3; do
    bg=${colours[$(( (i + n) % 8 ))]}
    fg=${colours[$(( (i * 3 + n + 1) % 8 ))]}
    [ "$bg" = "$fg" ] && fg=${colours[$(( (i * 3 + n + 2) % 8 ))]}
    f="img$n.png"
    make_image "$out/data/$f" "$bg" "$shape" "$fg"
    line=$(printf '{"image": "%s", "prompt": "a %s %s on a %s background"}' "$f" "$fg" "$shape" "$bg")
    if [ $(( n % 4 )) -eq 3 ]; then echo "$line" >> "$out/data/val.jsonl"; else echo "$line" >> "$out/data/train.jsonl"; fi
    n=$((n + 1))
  done
done
"$host" data check --config "$root/configs/demo.toml" > "$out/data-check.txt"
grep -E "^(rows|buckets|validation)" "$out/data-check.txt" || tail -n 4 "$out/data-check.txt"

step "training: embedded local mode, a syncer and 2 learner islands (DiLoCo over loopback)"
"$host" train --config "$root/configs/demo.toml" --islands 2 2>&1 | tee "$out/train.txt" | \
  grep -vE "^\s*$" | grep -E "embedded run|outer steps|final cut|island-|traffic of the islands|exit codes|report:|val_loss" || true

step "export the syncer's final cut as an adapter directory (Diffusers + PEFT layouts)"
"$host" export --config "$root/configs/demo.toml" --checkpoint "$out/run/syncer" --output-dir "$out/adapter" > "$out/export.txt"
ls "$out/adapter"

step "sample a grid from base + adapter"
cat > "$out/prompts.txt" <<'PROMPTS'
a red square on a blue background
a yellow bar on a black background
a white column on a green background
a orange square on a purple background
PROMPTS
"$host" sample --model "$out/flux-tiny" --diffusion-adapter flux --adapter-dir "$out/adapter" \
  --prompts "$out/prompts.txt" --seed 42 --steps 8 --guidance 3.5 --height 64 --width 64 \
  --max-sequence-length 32 --output "$out/samples/sample.png" > "$out/sample.txt"
samples=("$out"/samples/*.png)
ffmpeg -hide_banner -loglevel error -y $(for s in "${samples[@]}"; do printf -- '-i %s ' "$s"; done) \
  -filter_complex "$(for i in "${!samples[@]}"; do printf '[%d:v]' "$i"; done)xstack=inputs=${#samples[@]}:layout=0_0|w0_0|0_h0|w0_h0" \
  "$out/grid.png"

step "summary"
val_loss_at() {  # first and last val_loss of island-0's metrics.jsonl
  grep -o '"val_loss":[^,}]*' "$out/run/island-0/metrics.jsonl" | sed -n "$1" | cut -d: -f2
}
echo "parity:      $(grep '^summary:' "$out/parity.txt" | sed 's/^summary: //')"
echo "val_loss:    start $(val_loss_at 1p), end $(val_loss_at '$p') (island-0, held-out rows)"
grep -E "outer steps merged|traffic of the islands" "$out/train.txt" | sed 's/^ */             /'
echo "report:      $out/run/report/index.html (loss, val_loss, learning rate, throughput, merges, traffic, renders)"
echo "renders:     $(ls "$out"/run/island-0/samples/*/p*.png 2>/dev/null | wc -l) validation renders in $out/run/island-0/samples (before training, every 100 steps, final cut)"
echo "adapter:     $out/adapter"
echo "samples:     $out/grid.png (${#samples[@]} images in $out/samples)"
echo "TensorBoard: tensorboard --logdir $out/run"
echo "took:        $(( $(date +%s) - t0 )) s"
