#!/usr/bin/env bash
# Run both decoders on a real GPU through Vulkan and compare with the oracle
# at the full test shapes (which lavapipe cannot run: llvmpipe stops loops
# after 65535 iterations per invocation). Usage, from the repo root:
#   bash tools/gpu_check.sh            # NVIDIA: set up the loader if missing
# tools/gpu_env.sh sets up the Vulkan loader, the wheels and this package.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/gpu_env.sh
export VYRE_VULKAN_DEVICE="${VYRE_VULKAN_DEVICE:-}"
python3 - <<'PY'
import os, time, numpy as np, vyre_xdsl as vx
OPTIMIZE = os.environ.get("VYRE_OPTIMIZE", "default")
from vyre_xdsl.kernel_info import kernel_info
from vyre_xdsl.spirv import emit_spirv
from vyre_xdsl.vulkan import execute, device_report
print(device_report())
rng = np.random.default_rng(0)
def check(name, module, inputs, ref):
    lowered = vx.lower_to_gpu(module, optimize=OPTIMIZE); info = kernel_info(lowered)
    for preserve in (False, True):
        arrays = {b.name: (np.ascontiguousarray(inputs[b.name], np.float32).reshape(-1).copy()
                  if not b.is_output else np.zeros(b.count, np.float32)) for b in info.buffers}
        t = {}
        execute(emit_spirv(lowered, preserve_nan_inf=preserve), info, arrays, timings=t)
        out = arrays["out"].reshape(ref.shape)
        err = float(np.nanmax(np.abs(out - ref))) if np.isfinite(ref).any() else 0.0
        nan_ok = bool((np.isnan(out) == np.isnan(ref)).all())
        print(f"{name} preserve_nan_inf={preserve}: max|err|={err:.3g} nan-placement-ok={nan_ok} "
              f"dispatch {t.get('dispatch_ms', float('nan')):.3f} ms")
S, D = 512, 64
q, k, v = (rng.standard_normal((S, D)).astype(np.float32) for _ in range(3))
check("fa2 512x64", vx.flash_attention_2(seq_len=S, head_dim=D), {"q": q, "k": k, "v": v},
      vx.reference.flash_attention_2(q, k, v, tile_size=64))
q2 = q.copy(); q2[7, 1] = np.nan; k2 = k.copy(); k2[3, 0] = np.inf; k2[9, 5] = -np.inf
check("fa2 512x64 NaN row/inf K", vx.flash_attention_2(seq_len=S, head_dim=D), {"q": q2, "k": k2, "v": v},
      vx.reference.flash_attention_2(q2, k2, v, tile_size=64))
S, H, D, R, P = 1000, 8, 64, 32, 16
ins = dict(q=rng.standard_normal((H, D)), kv_cache=rng.standard_normal((S, R)),
           kr_cache=rng.standard_normal((S, P)), w_uk=rng.standard_normal((R, H * D)) * 0.3,
           w_uv=rng.standard_normal((R, H * D)))
ins = {n: a.astype(np.float32) for n, a in ins.items()}
check("mla 1000/8/64/32/16", vx.mla_decode(seq_len=S, num_heads=H, head_dim=D, kv_lora_rank=R,
      qk_rope_head_dim=P), ins, vx.reference.mla_decode(**ins, tile_size=64))
S, D = 4096, 64
q, k, v = (rng.standard_normal((S, D)).astype(np.float32) for _ in range(3))
check("fa2 4096x64", vx.flash_attention_2(seq_len=S, head_dim=D), {"q": q, "k": k, "v": v},
      vx.reference.flash_attention_2(q, k, v, tile_size=64))
PY
