#!/usr/bin/env bash
# The demo: the main job of the host on this build. Called by `make demo` after the build.
set -euo pipefail
build_dir="${1:-build}"
host="$build_dir/bin/yeto-host"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/demo-output"
mkdir -p "$out"

echo "== yeto-host version"
"$host" version
echo
echo "== resolved demo configuration (every value with its origin)"
"$host" config --print --config "$root/configs/demo.toml" --output "$out/run" | tee "$out/resolved-config.toml"
echo
echo "== validating every example configuration"
for f in "$root"/configs/*.toml; do
  "$host" config --check --config "$f"
done
