#!/usr/bin/env bash
# Did the demo's adapter learn? For every prompt "a FG SHAPE on a BG background" of PROMPTS
# (one per line), compares the mean colour inside the shape's region and outside it with the
# named colours, in the base model's image (BASE-NNN.png) and the adapted model's (ADAPTED-NNN.png)
# from `yeto-host sample --compare-base`. The shapes are those of the demo's dataset (square:
# 32x32 at (16, 16); bar: the rows 24-39; column: the columns 24-39, of a 64x64 image).
#
#   demo_check.sh PROMPTS BASE_STEM ADAPTED_STEM
#
# Prints one line per prompt: the colour error of the base and of the adapted image (the mean of
# the two regions' RGB distances to the named colours, RGB in [0, 1]; 0 is exact, black to white
# is 1.73), the mean absolute difference between the base and the adapted image, and whether the
# adapter learned the prompt (its error at most 0.5 and at least 0.2 below the base's). Exits 1
# unless at least two prompts are learned and every adapted image differs from the previous
# prompt's adapted image and from its base image (mean absolute difference above 0.1).
set -euo pipefail
prompts="$1" base="$2" adapted="$3"

rgb_of() {
  case "$1" in
    red) echo "1 0 0" ;; green) echo "0 0.502 0" ;; blue) echo "0 0 1" ;; yellow) echo "1 1 0" ;;
    white) echo "1 1 1" ;; black) echo "0 0 0" ;; orange) echo "1 0.647 0" ;; purple) echo "0.502 0 0.502" ;;
    *) echo "demo_check: unknown colour '$1'" >&2; return 1 ;;
  esac
}
# One pixel per line, "r g b" in 0-255, row-major, of a 64x64 PNG.
pixels() {
  ffmpeg -nostdin -hide_banner -loglevel error -i "$1" -vf scale=64:64:flags=neighbor -f rawvideo -pix_fmt rgb24 - | od -An -v -tu1 -w3
}
# error FILE SHAPE "fg rgb" "bg rgb": the colour error of one image.
error() {
  pixels "$1" | awk -v shape="$2" -v fg="$3" -v bg="$4" '
    BEGIN { split(fg, f, " "); split(bg, b, " ") }
    { x = (NR - 1) % 64; y = int((NR - 1) / 64)
      inside = (shape == "square" && x >= 16 && x < 48 && y >= 16 && y < 48) ||
               (shape == "bar" && y >= 24 && y < 40) || (shape == "column" && x >= 24 && x < 40)
      k = inside ? "i" : "o"; n[k]++; r[k] += $1 / 255; g[k] += $2 / 255; bl[k] += $3 / 255 }
    END { di = sqrt((r["i"]/n["i"] - f[1])^2 + (g["i"]/n["i"] - f[2])^2 + (bl["i"]/n["i"] - f[3])^2)
          do_ = sqrt((r["o"]/n["o"] - b[1])^2 + (g["o"]/n["o"] - b[2])^2 + (bl["o"]/n["o"] - b[3])^2)
          printf "%.3f\n", (di + do_) / 2 }'
}
# difference A B: mean absolute difference of two images, RGB in [0, 1].
difference() {
  paste -d' ' <(pixels "$1") <(pixels "$2") | awk '
    { for (c = 1; c <= 3; c++) { v = $c - $(c + 3); s += v < 0 ? -v : v }; n += 3 }
    END { printf "%.3f\n", s / n / 255 }'
}

ok=1 i=0 learned=0 previous=""
printf '%-44s %9s %9s %9s %12s  %s\n' "prompt" "base err" "adapted" "vs base" "vs previous" "learned"
while IFS= read -r prompt || [ -n "$prompt" ]; do
  [ -z "$prompt" ] && continue
  read -r _ fg shape _ _ bg _ <<< "$prompt"
  n=$(printf '%03d' "$i")
  b=$(error "$base-$n.png" "$shape" "$(rgb_of "$fg")" "$(rgb_of "$bg")")
  a=$(error "$adapted-$n.png" "$shape" "$(rgb_of "$fg")" "$(rgb_of "$bg")")
  vb=$(difference "$base-$n.png" "$adapted-$n.png")
  d="-"
  [ -n "$previous" ] && d=$(difference "$previous" "$adapted-$n.png")
  verdict=$(awk -v a="$a" -v b="$b" 'BEGIN { print (a <= 0.5 && a + 0.2 <= b) ? "yes" : "no" }')
  printf '%-44s %9s %9s %9s %12s  %s\n' "$prompt" "$b" "$a" "$vb" "$d" "$verdict"
  [ "$verdict" = yes ] && learned=$((learned + 1))
  awk -v vb="$vb" -v d="$d" 'BEGIN { if (vb > 0.1 && (d == "-" || d > 0.1)) exit 0; exit 1 }' || ok=0
  previous="$adapted-$n.png"
  i=$((i + 1))
done < "$prompts"
[ "$i" -ge 2 ] || { echo "demo_check: $prompts needs at least two prompts" >&2; exit 2; }
[ "$learned" -ge 2 ] || ok=0
if [ "$ok" = 1 ]; then echo "separation: the adapter learned $learned of $i prompts; its images differ from the base's and from each other"
else echo "separation: NOT reached ($learned of $i prompts learned; see the table above)"; exit 1; fi
