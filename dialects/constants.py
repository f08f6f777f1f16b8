"""Numbers the dialect, the passes, the oracle and the executors share.

Each is defined here once; every other module imports it from here.
"""

from __future__ import annotations

import math

import numpy as np

# Item counts, sizes and indices are 32-bit unsigned on the device.
U32_MAX = 2**32 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
# Lowered kernels record bindings as i32 (docs/lowered-ir.md).
BINDING_MAX = I32_MAX

# The largest finite f32, and its negation: the recurrence's running maximum
# starts at F32_MIN (not -inf, so that `s - m` is never inf - inf).
F32_MAX = 3.4028234663852886e38
F32_MIN = -F32_MAX
# The smallest normal f32 (2^-126): the stability helpers' floor.
MIN_POSITIVE = 1.1754943508222875e-38
# What vyre.bounded_score makes of -inf scores and vyre.bounded_exp_arg's
# lower bound: exp(-80) is still a normal f32.
SCORE_FLOOR = -80.0
# log2(e) as an f32: vyre-use-exp2 folds it into scores, whose floor is then
# SCORE_FLOOR * LOG2_E (score_floor)
LOG2_E = float(np.float32(math.log2(math.e)))


def score_floor(log2: bool) -> float:
    """SCORE_FLOOR in natural units, or in log2 units (`log2`)."""
    return SCORE_FLOOR * LOG2_E if log2 else SCORE_FLOOR

# The smallest positive f16 (a subnormal): no weight exp(bounded_exp_arg(x))
# is 0, so none that vyre-tensor-cores reads in f16 may round to 0 either.
F16_SMALLEST = 2.0**-24

# The memref memory space of workgroup (shared) memory, as in MLIR's GPU
# dialect and SPIR-V's Workgroup storage class.
WORKGROUP_MEMORY_SPACE = 3

# Lanes of a workgroup unless a pass or the caller picks another size.
DEFAULT_LANES = 64
# vectors of f32 the passes make and the SPIR-V emitter reads and writes whole
F32_VECTOR_WIDTHS = (2, 4)
