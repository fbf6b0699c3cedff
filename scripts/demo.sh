#!/usr/bin/env bash
# The demo: the main job of yeto-host, end to end on CPU. Called by `make demo` after the
# build; everything it writes lands in demo-output/.
#
#   1. the build's identity and the signed plugins it ships
#   2. a tiny FLUX.1-layout repository created with init-model (seeded random transformer and
#      text encoders, generated tokenizers, the analytic pixel-codec VAE), inspected
#   3. this build checked against recorded upstream outputs, including a complete FluxPipeline
#      generation (tokens, embeddings, every step, the decoded image)
#   4. a generated captioned image dataset, validated as training decodes it: shapes on blue and
#      black for the base, on purple and orange (train + held-out) for the LoRA; the base model is
#      the random transformer after a short full fine-tune on the first set (cached in the build
#      directory, reused on re-runs)
#   5. the embedded local mode: one syncer and two learner islands as child processes,
#      DiLoCo fragment synchronisation over loopback, TensorBoard logs in the run directory
#   6. the syncer's final cut exported as a Diffusers + PEFT adapter directory
#   7. a labelled grid: every prompt sampled from the base model and from base + adapter
#   8. the check that the adapter learned: colours inside and outside each prompt's shape
#   9. a summary: val_loss at start and end, outer steps merged, traffic both ways vs all-reduce,
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

step "a tiny FLUX.1-layout repository from the flux plugin's 'demo' preset (its VAE is the analytic pixel codec)"
"$host" init-model --family flux --preset demo --seed 7 --out "$out/flux-random"
"$host" inspect "$out/flux-random" --diffusion-adapter flux > "$out/inspect-flux-demo.txt"
grep -E "^(pipeline|components|  [a-z_0-9]+ )" "$out/inspect-flux-demo.txt" | head -n 12 || true

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
bash "$root/scripts/demo_data.sh" "$out/data"
echo "$(wc -l < "$out/data/base.jsonl") rows on blue and black backgrounds for the base model;" \
  "$(wc -l < "$out/data/train.jsonl") rows on purple and orange for the LoRA, $(wc -l < "$out/data/val.jsonl") held out"
"$host" data check --config "$root/configs/demo.toml" > "$out/data-check.txt"
grep -E "^(rows|buckets|validation)" "$out/data-check.txt" || tail -n 4 "$out/data-check.txt"

# A random tiny transformer does not learn images from a LoRA within minutes on a CPU, so the base
# first gets a short full fine-tune on the blue and black set (it learns the shapes), exported,
# merged into a model and cached in the build directory for re-runs.
base_key=$( (cat "$root/configs/demo-base.toml" "$root/scripts/demo_data.sh"; "$host" version) | sha256sum | cut -c1-16)
base_cache="$root/$build_dir/demo-cache/flux-demo-$base_key"
if [ -f "$base_cache/model_index.json" ]; then
  step "the base model: reusing the full fine-tune cached in $base_cache"
  base_stage="reused from $base_cache"
else
  step "the base model: a full fine-tune of the random transformer on the blue and black set (cached for re-runs)"
  "$host" train --config "$root/configs/demo-base.toml" 2>&1 | tee "$out/base-train.txt" | grep -E "step [0-9]+/[0-9]+ .*(00|00/)|done:" || true
  "$host" export --checkpoint "$out/base-run" --output-dir "$out/base-export"  # with the run's recorded config
  rm -rf "$base_cache.tmp"
  "$host" merge --model "$out/flux-random" --adapter-dir "$out/base-export" --output-dir "$base_cache.tmp"
  rm -rf "$base_cache"
  mv "$base_cache.tmp" "$base_cache"
  base_stage="trained in this run, $(grep -c '"loss"' "$out/base-run/metrics.jsonl") steps, cached in $base_cache"
fi
cp -r "$base_cache" "$out/flux-demo"

step "training: embedded local mode, a syncer and 2 learner islands (DiLoCo over loopback)"
"$host" train --config "$root/configs/demo.toml" --islands 2 2>&1 | tee "$out/train.txt" | \
  grep -vE "^\s*$" | grep -E "embedded run|outer steps|final cut|island-|traffic of the islands|exit codes|report:|val_loss" || true

step "export the syncer's final cut as an adapter directory (Diffusers + PEFT layouts)"
"$host" export --config "$root/configs/demo.toml" --checkpoint "$out/run/syncer" --output-dir "$out/adapter" > "$out/export.txt"
ls "$out/adapter"

step "sample the base model and base + adapter side by side (same prompts and seeds)"
"$host" sample --model "$out/flux-demo" --diffusion-adapter flux --adapter-dir "$out/adapter" --compare-base \
  --prompts "$out/data/prompts.txt" --seed 42 --steps 8 --guidance 3.5 --height 64 --width 64 \
  --max-sequence-length 32 --output "$out/samples/sample.png" --grid "$out/grid.png" > "$out/sample.txt"
echo "grid: $out/grid.png"

step "did it learn? the colours inside and outside each prompt's shape, base model vs adapter"
bash "$root/scripts/demo_check.sh" "$out/data/prompts.txt" "$out/samples/sample-base" "$out/samples/sample" | tee "$out/separation.txt"

step "summary"
val_loss_at() {  # first and last val_loss of island-0's metrics.jsonl
  grep -o '"val_loss":[^,}]*' "$out/run/island-0/metrics.jsonl" | sed -n "$1" | cut -d: -f2
}
echo "parity:      $(grep '^summary:' "$out/parity.txt" | sed 's/^summary: //')"
echo "base model:  the random 'demo' preset after a full fine-tune on shapes over blue and black ($base_stage)"
echo "val_loss:    start $(val_loss_at 1p), end $(val_loss_at '$p') (island-0, held-out rows)"
grep -E "outer steps merged|traffic of the islands" "$out/train.txt" | sed 's/^ */             /'
echo "report:      $out/run/report/index.html (loss, val_loss, learning rate, throughput, merges, traffic, renders)"
echo "renders:     $(ls "$out"/run/island-0/samples/*/p*.png 2>/dev/null | wc -l) validation renders in $out/run/island-0/samples (before training, every 100 steps, final cut)"
echo "adapter:     $out/adapter"
echo "grid:        $out/grid.png (one row per prompt: base model | base + adapter, seed 42)"
echo "learned:     $(tail -n 1 "$out/separation.txt")"
echo "TensorBoard: tensorboard --logdir $out/run"
echo "took:        $(( $(date +%s) - t0 )) s"
