#!/usr/bin/env bash
# Run both decoders on a real GPU through Vulkan and compare with references
# at model-sized shapes, NaN/inf cases and a sweep of head dims and head
# counts (tools/gpu_check.py; lavapipe cannot run most of them: llvmpipe
# stops loops after 65535 iterations per invocation). From the repo root:
#   bash tools/gpu_check.sh [--all] [--match TEXT]
# tools/gpu_env.sh sets up the Vulkan loader, the wheels and this package.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/gpu_env.sh
python3 tools/gpu_check.py "$@"
