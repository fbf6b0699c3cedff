#!/usr/bin/env bash
# The demo's captioned image set: coloured shapes on coloured backgrounds, 64x64 PNGs drawn with
# FFmpeg, every edge on the 8-pixel grid of the demo model's pixel-codec VAE.
#
#   demo_data.sh OUT_DIR
#
# Writes OUT_DIR/imgN.png and three sets over the shapes square, bar, column in red, yellow,
# white, green: base.jsonl (on blue and black backgrounds: the short full fine-tune that gives
# the random tiny base its shapes), train.jsonl and val.jsonl (on purple and orange, which the base
# never saw: the LoRA's set, one combination per shape and background held out) and prompts.txt
# (training prompts the demo renders with the base and the adapter, checked by demo_check.sh).
set -euo pipefail
out="$1"
mkdir -p "$out"
shapes=(square bar column)
foregrounds=(red yellow white green)
geometry() {  # shape colour
  case "$1" in
    square) echo "drawbox=x=16:y=16:w=32:h=32:color=$2:t=fill" ;;
    bar) echo "drawbox=x=0:y=24:w=64:h=16:color=$2:t=fill" ;;
    column) echo "drawbox=x=24:y=0:w=16:h=64:color=$2:t=fill" ;;
  esac
}
n=0
# rows SPLIT BACKGROUND...: every shape and foreground on each background; SPLIT is "base" (all
# into base.jsonl) or "adapter" (one combination per shape and background held out into val.jsonl).
rows() {
  local split=$1 s f b shape fg bg line
  shift
  local backgrounds=("$@")
  for s in "${!shapes[@]}"; do
    for f in "${!foregrounds[@]}"; do
      for b in "${!backgrounds[@]}"; do
        shape=${shapes[$s]} fg=${foregrounds[$f]} bg=${backgrounds[$b]}
        ffmpeg -nostdin -hide_banner -loglevel error -y -f lavfi -i "color=c=$bg:s=64x64" \
          -vf "$(geometry "$shape" "$fg")" -frames:v 1 "$out/img$n.png"
        line=$(printf '{"image": "img%d.png", "prompt": "a %s %s on a %s background"}' "$n" "$fg" "$shape" "$bg")
        if [ "$split" = base ]; then echo "$line" >> "$out/base.jsonl"
        elif [ $(( (f + s + b * 2) % 4 )) -eq 3 ]; then echo "$line" >> "$out/val.jsonl"
        else echo "$line" >> "$out/train.jsonl"; fi
        n=$((n + 1))
      done
    done
  done
}
: > "$out/base.jsonl"
: > "$out/train.jsonl"
: > "$out/val.jsonl"
rows base blue black
rows adapter purple orange
cat > "$out/prompts.txt" <<'PROMPTS'
a red square on a purple background
a yellow bar on a orange background
a white column on a purple background
a green square on a orange background
PROMPTS
# The rendered prompts must be training rows.
while IFS= read -r p; do
  grep -qF "\"prompt\": \"$p\"" "$out/train.jsonl" || { echo "demo_data: '$p' is not a training prompt" >&2; exit 1; }
done < "$out/prompts.txt"
