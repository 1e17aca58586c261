#!/usr/bin/env bash
# Installs the Debian packages tandem needs to build and test; idempotent (only missing ones).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev libopenblas-dev
  nlohmann-json3-dev libyaml-cpp-dev zlib1g-dev libzstd-dev libxxhash-dev libpcre2-dev libicu-dev
  libcli11-dev libfmt-dev libssl-dev libflatbuffers-dev
  libopenmpi-dev openmpi-bin
  # ip netns: the multi-host tests' simulated hosts (scripts/netns_hosts.sh)
  iproute2
  python3 python3-numpy python3-matplotlib
  # fuzz/ (libFuzzer with ASan + UBSan) and OpenMP for clang: scripts/fuzz.sh
  clang libclang-rt-dev libomp-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

# Where a CUDA compiler is installed, the CUDA backend is built too; its cuDNN attention needs the
# cuDNN frontend's headers (from PyPI, not committed). Never fatal.
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  bash "$(dirname "$0")/fetch_cudnn_frontend.sh"
fi
