"""How P's rounding to bf16 moves FlashAttention's outputs: a numpy model of
the matrix kernel's arithmetic, not a GPU run.

bf16 inputs, f32 scores and weights, P rounded to bf16 toward zero (what
NVIDIA's driver makes of OpFConvert) or to nearest even (spirv/half.py's
conversion), the denominator summed from the f32 weights, or P cut toward
zero with the denominator summed from the cut weights (what the matrix
kernels compute: MatrixElements.weight_operand); the output rounded to
bf16; each against float64 attention.

    python3 tools/p_rounding_model.py [--seq 512] [--dim 64] [--heads 2]
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16


def toward_zero(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def to_nearest_even(x: np.ndarray) -> np.ndarray:
    return x.astype(BF16).astype(np.float32)


# name -> (P's rounding, whether the denominator sums the rounded weights)
ROUNDINGS = {"toward zero": (toward_zero, False), "to nearest even": (to_nearest_even, False),
             "cut, sum cut": (toward_zero, True)}


def errors(seq: int, dim: int, heads: int, seed: int = 0) -> dict[str, np.ndarray]:
    """(out - exact) * sign(exact) for every output, by rounding of P."""
    rng = np.random.default_rng(seed)
    found: dict[str, list[np.ndarray]] = {name: [] for name in ROUNDINGS}
    for _ in range(heads):
        q, k, v = (rng.standard_normal((seq, dim)).astype(BF16).astype(np.float32)
                   for _ in range(3))
        s = (q @ k.T) / np.sqrt(np.float32(dim))
        m = s.max(axis=1, keepdims=True)
        p = np.exp(s - m).astype(np.float32)
        exact_p = np.exp(s.astype(np.float64) - m)
        exact = (exact_p @ v.astype(np.float64)) / exact_p.sum(axis=1, keepdims=True)
        for name, (rounding, sum_rounded) in ROUNDINGS.items():
            weights = rounding(p)
            summed = weights if sum_rounded else p
            out = ((weights @ v) / summed.sum(axis=1, keepdims=True)).astype(BF16)
            found[name].append(((out.astype(np.float64) - exact) * np.sign(exact)).ravel())
    return {name: np.concatenate(parts) for name, parts in found.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"N={args.seq} D={args.dim} heads={args.heads}")
    print(f"{'P rounded':<16} {'mean outward':>13} {'z':>8} {'mean |error|':>13}")
    for name, error in errors(args.seq, args.dim, args.heads).items():
        z = error.mean() / error.std() * np.sqrt(error.size)
        print(f"{name:<16} {error.mean():>13.2e} {z:>8.1f} {np.abs(error).mean():>13.2e}")


if __name__ == "__main__":
    main()
