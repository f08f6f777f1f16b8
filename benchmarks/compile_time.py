"""Compile-time benchmark: build -> vyre-to-gpu -> SPIR-V with vyre-xdsl,
side by side with upstream MLIR (mlir-opt-22 convert-gpu-to-spirv +
mlir-translate-22 --serialize-spirv) on the same lowered IR.

    python benchmarks/compile_time.py [--json PATH] [--repeat N]

MLIR needs three things our lowered IR does not carry, added textually: a
`spirv.target_env` on the module (SPIR-V 1.3, Shader), a
`spirv.entry_point_abi` with the workgroup size on the gpu.func, and
`--convert-math-to-spirv` before `--convert-gpu-to-spirv` (math ops are not
part of the gpu conversion). Each resulting spirv.module (one per kernel of
a program) is given a VCE triple by `spirv-lower-abi-attrs` (entry point)
and `spirv-update-vce`, cut out and serialized."""

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


def _spirv_modules(text: str) -> list[str]:
    """Each top-level `spirv.module` of `text` (one per gpu.module)."""
    modules, start = [], text.find("spirv.module")
    while start >= 0:
        depth = 0
        for end in range(text.index("{", start), len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        else:
            raise ValueError("unbalanced spirv.module")
        modules.append(text[start:end + 1])
        start = text.find("spirv.module", end)
    return modules


def _with_entry_point_abis(text: str, workgroups: list[tuple[int, int, int]]) -> str:
    """The workgroup size of each kernel on its gpu.func, in module order."""
    parts = text.split("gpu.kernel,")
    if len(parts) != len(workgroups) + 1:
        raise ValueError(f"{len(parts) - 1} gpu.kernel markers for {len(workgroups)} kernels")
    out = parts[0]
    for workgroup, rest in zip(workgroups, parts[1:]):
        abi = ("spirv.entry_point_abi = #spirv.entry_point_abi<workgroup_size = "
               f"[{', '.join(map(str, workgroup))}]>")
        out += f"gpu.kernel, {abi},{rest}"
    return out


def mlir_compile(lowered_text: str, workgroups: list[tuple[int, int, int]], tmp: str):
    """(seconds, [binary per kernel]) through upstream MLIR, or (None, reason)."""
    opt, translate = shutil.which("mlir-opt-22"), shutil.which("mlir-translate-22")
    if not opt or not translate:
        return None, "mlir-opt-22 / mlir-translate-22 not installed (Debian mlir-22-tools)"
    text = lowered_text.replace(
        "attributes {gpu.container_module}",
        "attributes {gpu.container_module, " + TARGET_ENV + "}", 1)
    text = _with_entry_point_abis(text, workgroups)
    src, mid = (os.path.join(tmp, n) for n in ("in.mlir", "spv.mlir"))
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
    binaries = []
    for index, module in enumerate(_spirv_modules(step.stdout)):
        part, spv = (os.path.join(tmp, f"{n}{index}") for n in ("part.mlir", "out.spv"))
        with open(part, "w") as f:
            f.write(module)
        serialized = subprocess.run([translate, "--no-implicit-module", "--serialize-spirv",
                                     part, "-o", spv], capture_output=True, text=True)
        if serialized.returncode:
            return None, ("mlir-translate-22 --serialize-spirv failed: "
                          + serialized.stderr.strip()[:400])
        with open(spv, "rb") as f:
            binaries.append(f.read())
    return time.perf_counter() - start, binaries


def spirv_val(val: str, blob: bytes, tmp: str) -> bool:
    path = os.path.join(tmp, "check.spv")
    with open(path, "wb") as f:
        f.write(blob)
    return subprocess.run([val, "--target-env", "vulkan1.1", path],
                          capture_output=True).returncode == 0


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
        from vyre_xdsl.kernel_info import program_info
        # one workgroup size per kernel (flash-decoding lowers to a program)
        workgroups = [k.workgroup_size for k in program_info(lowered).kernels]
        with tempfile.TemporaryDirectory() as tmp:
            mlir_times, mlir_binaries, reason = [], None, None
            for _ in range(args.repeat if optimize == "none" else 0):
                seconds, out = mlir_compile(str(lowered), workgroups, tmp)
                if seconds is None:
                    reason = out
                    break
                mlir_times.append(seconds)
                mlir_binaries = out
            valid = {}
            for label, blobs in (("vyre", [binary]), ("mlir", mlir_binaries)):
                if blobs is not None and val:
                    valid[label] = all(spirv_val(val, blob, tmp) for blob in blobs)
        # MLIR makes one SPIR-V module per kernel, we make one for the program
        mlir_count = (sum(instruction_count(b) for b in mlir_binaries)
                      if mlir_binaries else None)
        mlir_bytes = sum(len(b) for b in mlir_binaries) if mlir_binaries else None
        row = {
            "case": name,
            "optimize": optimize,
            "vyre_build_s": best["build"], "vyre_lower_s": best["lower"],
            "vyre_emit_s": best["emit"], "vyre_total_s": ours,
            "vyre_instructions": instruction_count(binary), "vyre_bytes": len(binary),
            "vyre_spirv_val": valid.get("vyre"),
            "mlir_s": min(mlir_times) if mlir_times else None,
            "mlir_instructions": mlir_count,
            "mlir_bytes": mlir_bytes,
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
