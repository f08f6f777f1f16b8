#!/usr/bin/env bash
# Install what vyre-xdsl needs on a fresh Debian/Ubuntu machine: the Debian
# tools the tests use (upstream MLIR, SPIR-V tools and the grammar the
# vendored tables are checked against, a CPU Vulkan driver and the
# validation layer) and the package itself with its test extras.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(mlir-22-tools spirv-tools spirv-headers mesa-vulkan-drivers libvulkan1 vulkan-validationlayers)
missing=()
for package in "${APT_PACKAGES[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
    echo "error: need root (or sudo) to apt-get install ${missing[*]}" >&2; exit 1
  fi
  echo "setup: apt-get install ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "setup: pip install -e .[test,vulkan]"
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore -e ".[test,vulkan]"
