#!/usr/bin/env bash
# The main job: compile both decoders from their vyre IR to SPIR-V, validate
# it, run it on Vulkan (the best device found; lavapipe on a CPU-only
# machine) and compare with the numpy oracle of SEMANTICS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for decoder in flash_attention_2 mla_decode; do
  echo "== $decoder: vyre IR -> gpu -> SPIR-V"
  vyre-opt "examples/$decoder.mlir" -p vyre-to-gpu -t spirv -o "$out/$decoder.spv"
  spirv-val --target-env vulkan1.1 "$out/$decoder.spv" && echo "spirv-val: ok ($(stat -c %s "$out/$decoder.spv") bytes)"
  echo "== $decoder on Vulkan vs the oracle"
  vyre-run "examples/$decoder.mlir" --backend vulkan --random --seed 1 --check
  echo "== $decoder in the xDSL interpreter vs the oracle"
  vyre-run "examples/$decoder.mlir" --backend interpreter --random --seed 1 --check
done
