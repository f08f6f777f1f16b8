"""Compile-time benchmark: build -> vyre-to-gpu -> SPIR-V with vyre-xdsl,
side by side with upstream MLIR (mlir-opt-22 convert-gpu-to-spirv +
mlir-translate-22 --serialize-spirv) on the same lowered IR.

    python benchmarks/compile_time.py [--json PATH] [--repeat N]

MLIR needs three things our lowered IR does not carry, added textually: a
`spirv.target_env` on the module (SPIR-V 1.3, Shader), a
`spirv.entry_point_abi` with the workgroup size on the gpu.func, and
`--convert-math-to-spirv` before `--convert-gpu-to-spirv` (math ops are not
part of the gpu conversion). The resulting spirv.module is cut out, given a
VCE triple by `spirv-lower-abi-attrs` (entry point) and `spirv-update-vce`, and serialized."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import vyre_xdsl as vx  # noqa: E402
from vyre_xdsl.spirv import emit_spirv  # noqa: E402

CASES = {
    "fa2 seq4096 d64": lambda: vx.flash_attention_2(seq_len=4096, head_dim=64),
    "mla seq4096 h16 d128 r512 p64": lambda: vx.mla_decode(
        seq_len=4096, num_heads=16, head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64),
}
TARGET_ENV = ("spirv.target_env = #spirv.target_env<#spirv.vce<v1.3, [Shader], "
              "[SPV_KHR_storage_buffer_storage_class]>, #spirv.resource_limits<>>")


def instruction_count(binary: bytes) -> int:
    words = struct.unpack(f"<{len(binary) // 4}I", binary)
    pos, count = 5, 0
    while pos < len(words):
        pos += max(words[pos] >> 16, 1)
        count += 1
    return count


def _spirv_module(text: str) -> str:
    start = text.index("spirv.module")
    depth = 0
    for end in range(text.index("{", start), len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[start:end + 1]
    raise ValueError("unbalanced spirv.module")


def mlir_compile(lowered_text: str, workgroup: tuple[int, int, int], tmp: str):
    """(seconds, binary) through upstream MLIR, or (None, reason)."""
    opt, translate = shutil.which("mlir-opt-22"), shutil.which("mlir-translate-22")
    if not opt or not translate:
        return None, "mlir-opt-22 / mlir-translate-22 not installed (Debian mlir-22-tools)"
    text = lowered_text.replace(
        "attributes {gpu.container_module}",
        "attributes {gpu.container_module, " + TARGET_ENV + "}", 1)
    abi = f"spirv.entry_point_abi = #spirv.entry_point_abi<workgroup_size = [{', '.join(map(str, workgroup))}]>"
    text = text.replace("gpu.kernel,", f"gpu.kernel, {abi},", 1)
    src, mid, spv = (os.path.join(tmp, n) for n in ("in.mlir", "spv.mlir", "out.spv"))
    with open(src, "w") as f:
        f.write(text)
    start = time.perf_counter()
    step = subprocess.run([opt, "--convert-math-to-spirv", "--convert-gpu-to-spirv", src],
                          capture_output=True, text=True)
    if step.returncode:
        return None, "mlir-opt-22 --convert-gpu-to-spirv failed: " + step.stderr.strip()[:400]
    with open(mid, "w") as f:
        f.write(step.stdout)
    step = subprocess.run([opt, "--pass-pipeline=builtin.module(spirv.module(spirv-lower-abi-attrs, spirv-update-vce))",
                           mid], capture_output=True, text=True)
    if step.returncode:
        return None, "spirv-update-vce failed: " + step.stderr.strip()[:400]
    with open(mid, "w") as f:
        f.write(_spirv_module(step.stdout))
    step = subprocess.run([translate, "--no-implicit-module", "--serialize-spirv", mid,
                           "-o", spv], capture_output=True, text=True)
    if step.returncode:
        return None, "mlir-translate-22 --serialize-spirv failed: " + step.stderr.strip()[:400]
    seconds = time.perf_counter() - start
    with open(spv, "rb") as f:
        return seconds, f.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results = []
    val = shutil.which("spirv-val")
    # MLIR's SPIR-V conversion is run on the seed layout (optimize=none): it
    # cannot legalize the private memref.alloca of the default optimisation.
    for (name, build), optimize in [(case, level) for case in CASES.items()
                                    for level in ("none", "default")]:
        best = {"build": 1e9, "lower": 1e9, "emit": 1e9}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            module = build()
            t1 = time.perf_counter()
            lowered = vx.lower_to_gpu(module, optimize=optimize)
            t2 = time.perf_counter()
            binary = emit_spirv(lowered)
            t3 = time.perf_counter()
            for key, dt in (("build", t1 - t0), ("lower", t2 - t1), ("emit", t3 - t2)):
                best[key] = min(best[key], dt)
        ours = sum(best.values())
        from vyre_xdsl.kernel_info import kernel_info
        wg = kernel_info(lowered).workgroup_size
        with tempfile.TemporaryDirectory() as tmp:
            mlir_times, mlir_binary, reason = [], None, None
            for _ in range(args.repeat if optimize == "none" else 0):
                seconds, out = mlir_compile(str(lowered), wg, tmp)
                if seconds is None:
                    reason = out
                    break
                mlir_times.append(seconds)
                mlir_binary = out
            valid = {}
            for label, blob in (("vyre", binary), ("mlir", mlir_binary)):
                if blob is not None and val:
                    path = os.path.join(tmp, label + ".spv")
                    with open(path, "wb") as f:
                        f.write(blob)
                    valid[label] = subprocess.run([val, "--target-env", "vulkan1.1", path],
                                                  capture_output=True).returncode == 0
        row = {
            "case": name,
            "optimize": optimize,
            "vyre_build_s": best["build"], "vyre_lower_s": best["lower"],
            "vyre_emit_s": best["emit"], "vyre_total_s": ours,
            "vyre_instructions": instruction_count(binary), "vyre_bytes": len(binary),
            "vyre_spirv_val": valid.get("vyre"),
            "mlir_s": min(mlir_times) if mlir_times else None,
            "mlir_instructions": instruction_count(mlir_binary) if mlir_binary else None,
            "mlir_bytes": len(mlir_binary) if mlir_binary else None,
            "mlir_spirv_val": valid.get("mlir"),
            "mlir_failure": reason,
        }
        row["ratio_vyre_over_mlir"] = (ours / row["mlir_s"]) if row["mlir_s"] else None
        results.append(row)
        print(f"{name} (optimize={optimize}):")
        print(f"  vyre-xdsl: build {best['build']*1e3:.1f} ms + vyre-to-gpu {best['lower']*1e3:.1f} ms"
              f" + emit {best['emit']*1e3:.1f} ms = {ours*1e3:.1f} ms; "
              f"{row['vyre_instructions']} instructions, {len(binary)} bytes, spirv-val {row['vyre_spirv_val']}")
        if row["mlir_s"] is not None:
            print(f"  mlir-22 (gpu->spirv + serialize on our lowered IR, 3 processes): "
                  f"{row['mlir_s']*1e3:.1f} ms; {row['mlir_instructions']} instructions, "
                  f"{row['mlir_bytes']} bytes, spirv-val {row['mlir_spirv_val']}")
            print(f"  ratio vyre/mlir = {row['ratio_vyre_over_mlir']:.2f}")
        elif reason is not None:
            print(f"  mlir-22 path unavailable: {reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
