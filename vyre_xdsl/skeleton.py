"""Build a `vyre.kernel` around the one tiled online-softmax skeleton.

A decoder is only its two fragments: `tiled_online_softmax` declares the
buffers and scratch, creates the `vyre.tiled_online_softmax` op and lets the
`scores` and `update` callbacks fill its two regions.  The recurrence itself
is not built here: `vyre-inline-fragments` expands it, once, for everyone.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import VerifyException

from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError
from vyre_xdsl.ir_builder import IRBuilder, Value

WORKGROUP_SIZE = 64


@dataclass(frozen=True)
class Buffer:
    """A storage buffer of a kernel: `access` is "read" (input) or "write"
    (output); `shape` is its logical row-major shape."""

    name: str
    shape: tuple[int, ...]
    access: str = "read"


class Fragment(IRBuilder):
    """What a fragment callback builds with: an `IRBuilder` at the end of
    the region, the region's arguments by name, and the kernel's buffers.

    `scores` fragments see item, lane, tile_start, tile_len, q_scratch,
    score_tile; `update` fragments see item, lane, tile_start, tile_len,
    m_new, rescale, score_tile, o_acc."""

    def __init__(
        self,
        region_args: Sequence[SSAValue],
        arg_names: Sequence[str],
        buffers: dict[str, SSAValue],
        shape: dict[str, int],
        insertion_point: InsertPoint,
    ) -> None:
        super().__init__(insertion_point)
        self.args = dict(zip(arg_names, region_args, strict=True))
        self.buffers = buffers
        self.head_dim = shape["head_dim"]
        self.tile_size = shape["tile_size"]
        self.seq_len = shape["seq_len"]

    def __getattr__(self, name: str) -> SSAValue:
        args = self.__dict__.get("args", {})
        if name in args:
            return args[name]
        raise AttributeError(
            f"a fragment has no {name!r}; it has {', '.join(args)} and "
            f".buffer(name)"
        )

    def buffer(self, name: str) -> SSAValue:
        if name not in self.buffers:
            raise VyreError(
                f"the fragment reads buffer {name!r}, which the kernel does not "
                f"declare; declared buffers: {', '.join(self.buffers)}"
            )
        return self.buffers[name]

    # The lane's slice of each scratch array (the seed's `scratch_index`).
    def q_index(self, d: Value) -> SSAValue:
        return self.flat_index(self.lane, self.head_dim, d)

    def o_index(self, d: Value) -> SSAValue:
        return self.flat_index(self.lane, self.head_dim, d)

    def score_index(self, j: Value) -> SSAValue:
        return self.flat_index(self.lane, self.tile_size, j)


FragmentFn = Callable[[Fragment], None]


def check_dimensions(**dims: int) -> None:
    """Every dimension is an int > 0 that fits u32, else a VyreError naming it."""
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise VyreError(
                f"{name} must be a positive integer, got {value!r} "
                f"({type(value).__name__})"
            )
        if value < 1:
            raise VyreError(f"{name} must be > 0, got {value}")
        if value > vyre.U32_MAX:
            raise VyreError(f"{name} = {value} does not fit in u32")


def check_u32_size(what: str, **factors: int) -> None:
    """A buffer or scratch size (product of named factors) must fit u32."""
    product = reduce(operator.mul, factors.values(), 1)
    if product > vyre.U32_MAX:
        names = " * ".join(f"{k} ({v})" for k, v in factors.items())
        # The workgroup size is fixed at 64 lanes: only the others can shrink.
        adjustable = [k for k in factors if k != "workgroup_size"]
        raise VyreError(
            f"{what} = {names} = {product} elements does not fit in u32 "
            f"(max {vyre.U32_MAX}); reduce {' or '.join(adjustable)}"
        )


def tiled_online_softmax(
    name: str,
    buffers: Sequence[Buffer],
    *,
    item_count: int,
    seq_len: int,
    head_dim: int,
    tile_size: int = 64,
    scores: FragmentFn,
    update: FragmentFn,
    q: str = "q",
    out: str = "out",
) -> ModuleOp:
    """A verified module holding one `vyre.kernel` named `name`: storage
    `buffers` (bound in the order given), the three scratch arrays, and the
    skeleton with the `scores` and `update` fragments.  `q` names the buffer
    whose rows are the items' queries, `out` the output buffer."""
    check_dimensions(
        item_count=item_count, seq_len=seq_len, head_dim=head_dim, tile_size=tile_size
    )
    check_u32_size(f"buffer {q!r}", item_count=item_count, head_dim=head_dim)
    check_u32_size("scratch q_scratch", workgroup_size=WORKGROUP_SIZE, head_dim=head_dim)
    check_u32_size(
        "scratch score_tile", workgroup_size=WORKGROUP_SIZE, tile_size=tile_size
    )
    names = [b.name for b in buffers]
    for role, wanted in (("q", q), ("out", out)):
        if wanted not in names:
            raise VyreError(
                f"the {role} buffer {wanted!r} is not among the buffers "
                f"({', '.join(names)}); declare it"
            )
    for buffer in buffers:
        shape = {f"{buffer.name}.shape[{i}]": d for i, d in enumerate(buffer.shape)}
        check_dimensions(**shape)
        check_u32_size(f"buffer {buffer.name!r}", **shape)

    kernel = vyre.KernelOp(name, item_count, WORKGROUP_SIZE)
    body = IRBuilder(InsertPoint.at_end(kernel.body.block))
    values: dict[str, SSAValue] = {}
    for binding, buffer in enumerate(buffers):
        op = vyre.BufferOp(buffer.name, binding, buffer.access, buffer.shape)
        body.emit(op)
        values[buffer.name] = op.result
    scratch = {
        scratch_name: body.emit(
            vyre.ScratchOp(scratch_name, WORKGROUP_SIZE * stride)
        ).results[0]
        for scratch_name, stride in (
            ("q_scratch", head_dim),
            ("score_tile", tile_size),
            ("o_acc", head_dim),
        )
    }
    skeleton = vyre.TiledOnlineSoftmaxOp(
        values[q],
        values[out],
        scratch["q_scratch"],
        scratch["score_tile"],
        scratch["o_acc"],
        item_count=item_count,
        seq_len=seq_len,
        head_dim=head_dim,
        tile_size=tile_size,
    )
    body.emit(skeleton)
    shape = skeleton.shape()
    for region, arg_names, fill in (
        (skeleton.scores, vyre.SCORES_ARGS, scores),
        (skeleton.update, vyre.UPDATE_ARGS, update),
    ):
        block = region.block
        fill(Fragment(block.args, arg_names, values, shape, InsertPoint.at_end(block)))
        block.add_op(vyre.YieldOp())

    module = ModuleOp([kernel])
    try:
        module.verify()
    except VerifyException as error:
        raise VyreError(f"kernel @{name} does not verify: {error}") from None
    return module


def f32_scale(head_dim: int) -> float:
    """`1 / sqrt(head_dim)` computed in f32, as SEMANTICS.md fixes it."""
    return float(np.float32(1.0) / np.sqrt(np.float32(head_dim)))


__all__ = [
    "Buffer",
    "Fragment",
    "tiled_online_softmax",
    "check_dimensions",
    "check_u32_size",
    "f32_scale",
    "WORKGROUP_SIZE",
]
