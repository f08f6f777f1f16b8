#!/usr/bin/env bash
# Set up, then run every test: lit + FileCheck for the passes and the CLI,
# pytest for the Python API, the interpreter, SPIR-V and Vulkan (lavapipe,
# with the Khronos validation layer on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export VYRE_VULKAN_VALIDATION=1
echo "== lit (tests/filecheck)"
lit -sv tests/filecheck
echo "== pytest (tests)"
# one worker per core (pytest-xdist); the slow fuzz files go first to whoever is free
python3 -m pytest -q -p no:cacheprovider -n auto --dist worksteal tests
