"""Fingerprints of the lowered IR and SPIR-V of a fixed set of kernels, at
every optimisation level and device profile: a refactoring that must not
change any kernel records them before and compares after.

    python tools/kernel_fingerprints.py > before.json
    ... change the compiler ...
    python tools/kernel_fingerprints.py --compare before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import numpy as np

import vyre_xdsl as vx
from vyre_xdsl.passes.vyre_to_gpu import OPTIMISATION_LEVELS

DEVICES = ("generic", "h200", "lavapipe")


def _rel_bias():
    table = np.linspace(-1.0, 1.0, 127, dtype=np.float32)
    return lambda s, q, kv: s + table[q - kv + 63]


KERNELS = {
    "fa2_128x64": lambda: vx.flash_attention_2(seq_len=128, head_dim=64),
    "fa2_4096x64_h32": lambda: vx.flash_attention_2(seq_len=4096, head_dim=64, num_heads=32),
    "fa2_4096x128_h32": lambda: vx.flash_attention_2(seq_len=4096, head_dim=128, num_heads=32),
    "fa2_300x256_h4": lambda: vx.flash_attention_2(seq_len=300, head_dim=256, num_heads=4),
    "fa2_causal_1024x64_h8": lambda: vx.flash_attention_2(
        seq_len=1024, head_dim=64, num_heads=8, mask_mod=lambda q, kv: q >= kv),
    "fa2_softcap_512x64": lambda: vx.flash_attention_2(
        seq_len=512, head_dim=64, score_mod=lambda s, q, kv: 30.0 * vx.tanh(s / 30.0)),
    "fa2_relbias_64x32": lambda: vx.flash_attention_2(
        seq_len=64, head_dim=32, score_mod=_rel_bias()),
    "fa2_gqa_decode_paged": lambda: vx.flash_attention_2(
        seq_len=1, kv_len=4096, head_dim=128, batch=8, num_heads=32, num_kv_heads=8,
        kv_lens=True, page_size=16, num_pages=2048),
    "fa2_lse_vdim_batch": lambda: vx.flash_attention_2(
        seq_len=100, kv_len=160, head_dim=64, v_head_dim=32, batch=2, num_heads=4,
        return_lse=True),
    "fa2_f16_1024x64": lambda: vx.flash_attention_2(seq_len=1024, head_dim=64, dtype="f16"),
    "fa2_bf16_256x128": lambda: vx.flash_attention_2(seq_len=256, head_dim=128, dtype="bf16"),
    "mla_4096_h16": lambda: vx.mla_decode(4096, 16, 128, 512, 64),
    "mla_1024_h128": lambda: vx.mla_decode(1024, 128, 128, 512, 64),
    "mla_absorbed_512_h16": lambda: vx.mla_decode_absorbed(512, 16, 128, 512, 64),
}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def fingerprints(names=None) -> dict[str, str]:
    out = {}
    for name, build in KERNELS.items():
        if names and name not in names:
            continue
        module = build()
        out[f"{name}/vyre"] = _digest(str(module).encode())
        for level in OPTIMISATION_LEVELS:
            for device in DEVICES if level == "default" else ("generic",):
                lowered = vx.lower_to_gpu(module, optimize=level, device=device)
                key = f"{name}/{level}/{device}"
                out[key + "/ir"] = _digest(str(lowered).encode())
                out[key + "/spirv"] = _digest(vx.compile_spirv(lowered))
        print(name, file=sys.stderr, flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", help="a JSON file written by an earlier run")
    parser.add_argument("--only", nargs="*", help="kernel names")
    args = parser.parse_args()
    now = fingerprints(args.only)
    if not args.compare:
        json.dump(now, sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    with open(args.compare) as f:
        before = json.load(f)
    changed = [k for k in sorted(now) if k in before and before[k] != now[k]]
    missing = [k for k in sorted(before) if k not in now and (not args.only or k.split("/")[0] in args.only)]
    for key in changed:
        print(f"changed  {key}")
    for key in missing:
        print(f"missing  {key}")
    same = sum(1 for k in now if before.get(k) == now[k])
    print(f"{same} identical, {len(changed)} changed, {len(missing)} missing")
    return 1 if changed or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
