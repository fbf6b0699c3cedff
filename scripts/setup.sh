#!/usr/bin/env bash
# Installs every Debian package the project needs to build, test and run the demo.
# Idempotent: when everything is already installed it does nothing (no apt-get update).
# Nothing is downloaded from anywhere but the configured Debian mirrors.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache make clang libclang-rt-14-dev
  libtorch-dev libgloo-dev libopenblas0-openmp
  libboost-dev
  libtomlplusplus-dev libspdlog-dev nlohmann-json3-dev
  libavformat-dev libavcodec-dev libswscale-dev libswresample-dev libavutil-dev ffmpeg
  libstb-dev libsodium-dev libsentencepiece-dev
  libgtest-dev libgmock-dev
  chromium  # report_test: a headless screenshot of the run report
  slurm-wlm munge  # fleet_slurm_test: a single-node Slurm cluster the test starts itself
  python3-yaml     # fleet_test: the SkyPilot and Kubernetes manifests parsed back
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${#missing[@]} package(s): ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
