#!/usr/bin/env bash
# The demo: the main job this build of yeto-host can run end to end, on real data.
# Called by `make demo` after the build. Everything it writes lands in demo-output/.
#
#   1. the build's identity and the signed plugins it ships (no plugin code runs to list them)
#   2. a complete FLUX.1-layout repository inspected: every component's class, config,
#      tensors and validation, resolved as a real Hub snapshot would be
#   3. this build checked against the recorded upstream reference outputs (schedulers,
#      tokenizers, VAE, CLIP and T5 encoders): max errors per output, PASS/FAIL
#   4. a generated captioned image dataset (odd sizes, grey and alpha images) validated the
#      way training decodes it: shapes per bucket, bad rows with their row numbers
#   5. the demo run's configuration resolved, with the origin of every value
set -euo pipefail
build_dir="${1:-build}"
root="$(cd "$(dirname "$0")/.." && pwd)"
host="$root/$build_dir/bin/yeto-host"
fixtures="$root/tests/fixtures"
out="$root/demo-output"
rm -rf "$out"
mkdir -p "$out/data"

step() { printf '\n== %s\n' "$*"; }

step "yeto-host version"
"$host" version

step "signed plugins of this build (manifests and signatures only)"
"$host" plugins list

step "inspect a FLUX.1-layout repository (sharded transformer and T5, CLIP + T5 tokenizers, VAE)"
"$host" inspect "$fixtures/repos/flux-tiny" | tee "$out/inspect-flux-tiny.txt"

step "parity against the recorded upstream outputs"
cases=()
for c in "$fixtures"/parity/scheduler-* "$fixtures"/parity/clip-tokenizer "$fixtures"/parity/sentencepiece-tokenizer \
         "$fixtures"/parity/clip-text "$fixtures"/parity/t5-encoder-* "$fixtures"/parity/umt5-encoder \
         "$fixtures"/parity/vae-kl-16ch; do
  [ -f "$c/case.json" ] && cases+=("$c")
done
"$host" check-parity "${cases[@]}" | tee "$out/parity.txt"

step "a generated captioned image dataset, validated as training decodes it"
i=0
: > "$out/data/train.jsonl"
for spec in "testsrc=size=96x80" "smptebars=size=64x64" "testsrc2=size=130x70" "mandelbrot=size=72x90" \
            "rgbtestsrc=size=64x48" "testsrc=size=50x120"; do
  f="img$i.png"
  case $i in
    3) ffmpeg -hide_banner -loglevel error -y -f lavfi -i "$spec" -frames:v 1 -pix_fmt gray "$out/data/$f" ;;
    4) ffmpeg -hide_banner -loglevel error -y -f lavfi -i "$spec" -frames:v 1 -pix_fmt rgba "$out/data/$f" ;;
    *) ffmpeg -hide_banner -loglevel error -y -f lavfi -i "$spec" -frames:v 1 "$out/data/$f" ;;
  esac
  printf '{"image": "%s", "prompt": "a generated test pattern number %d"}\n' "$f" "$i" >> "$out/data/train.jsonl"
  i=$((i + 1))
done
"$host" data check --data "$out/data/train.jsonl" --height 64 --width 64 --resize-mode center-crop \
  | tee "$out/data-check.txt"

step "the demo run's configuration, every value with its origin"
"$host" config --print --config "$root/configs/demo.toml" --output "$out/run" > "$out/resolved-config.toml"
head -n 12 "$out/resolved-config.toml"
echo "... (full text in demo-output/resolved-config.toml)"

step "summary"
echo "parity:  $(grep '^summary:' "$out/parity.txt" | sed 's/^summary: //') ($(grep -c '^  PASS' "$out/parity.txt" || true) outputs within tolerance)"
echo "dataset: $(grep '^rows:' "$out/data-check.txt")"
echo "outputs: $out"
