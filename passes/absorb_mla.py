"""vyre-absorb-mla: MLA decode with W_uk and W_uv absorbed.

The seed's MLA decode (SEMANTICS.md, Decoder 2) decompresses every key and
every value from the latent cache on the fly: each key costs
head_dim * kv_lora_rank multiply-adds for its score and as many again for
the update.  Matrix products are associative, so the query can be projected
into the latent space once (`q_lat = W_uk q`) and the output projected out
of it once (`out = W_uv o_lat`), where `o_lat` is the online-softmax average
of the latent rows: a key then costs kv_lora_rank + qk_rope_head_dim
multiply-adds for its score and kv_lora_rank for the update
(`vyre_xdsl.decoders.mla_decode_absorbed`).

It is an idiom-recognition pass, and a sound one: for each
`vyre.tiled_online_softmax` it reads the MLA shape from the kernel's buffers
(`q`, `kv_cache`, `kr_cache`, `w_uk`, `w_uv`, `out`) and the op's tile size,
builds the seed kernel of that shape with `mla_decode`, and rewrites only if
the kernel's body (buffers, scratch, the op's attributes, both fragments) is
structurally equivalent to it.  The op is then replaced by the absorbed one
and the kernel gains the two latent scratch arrays `q_lat` and `o_lat`.
Anything else, a modified MLA fragment included, is left alone.

`kernels=3` absorbs once per head instead: the seed kernel becomes the
program of `mla_decode_program`, three kernels run in order (q_lat = W_uk q
per head, attention over the latent cache, out = W_uv o_lat per head),
passing q_lat and o_lat through `temp` buffers.  In the one-kernel form
every invocation projects its head's query and output itself, which is
what bounds MLA decode once vyre-split-kv gives a head many invocations.

A kernel of f16 or bf16 buffers is rewritten into the absorbed form of the
same dtype (its latent temporaries and scratch stay f32).
The absorbed forms sum in another order, so their results are not
bit-identical to the seed's (within the tolerance in docs/performance.md):
`vyre-to-gpu` runs this pass only at `optimize=default`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dtypes import dtype_name
from vyre_xdsl.errors import VyreError

MLA_BUFFERS = ("q", "kv_cache", "kr_cache", "w_uk", "w_uv", "out")


def mla_shape(
    kernel: vyre.KernelOp, op: vyre.TiledOnlineSoftmaxOp
) -> tuple[int, ...] | None:
    """(seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim,
    tile_size) from the logical shapes of the kernel's MLA buffers, or None
    if it does not declare them as 2-D buffers."""
    shapes = {b.sym_name.data: b.logical_shape for b in kernel.buffers}
    if sorted(shapes) != sorted(MLA_BUFFERS) or any(len(s) != 2 for s in shapes.values()):
        return None
    (num_heads, head_dim), (seq_len, rank) = shapes["q"], shapes["kv_cache"]
    rope = shapes["kr_cache"][1]
    return (seq_len, num_heads, head_dim, rank, rope, op.shape()["tile_size"])


def only_kernel(module: ModuleOp) -> vyre.KernelOp:
    (kernel,) = (op for op in module.body.block.ops if isinstance(op, vyre.KernelOp))
    return kernel


def mla_dtype(kernel: vyre.KernelOp) -> str | None:
    """The element type ("f32", "f16", "bf16") shared by the kernel's
    buffers, or None if they differ (no seed MLA kernel then)."""
    names = {dtype_name(b.result.type.element_type) for b in kernel.buffers}
    return names.pop() if len(names) == 1 else None


def is_seed_mla(
    kernel: vyre.KernelOp, shape: tuple[int, ...], dtype: str | None = "f32"
) -> bool:
    """Whether `kernel` is, up to its name and SSA names,
    `mla_decode(*shape, dtype=dtype)`."""
    from vyre_xdsl.decoders import mla_decode

    if dtype is None:
        return False
    try:
        seed = only_kernel(mla_decode(*shape, dtype=dtype))
    except VyreError:
        return False
    return (
        kernel.item_count == seed.item_count
        and kernel.workgroup_size == seed.workgroup_size
        and kernel.body.is_structurally_equivalent(seed.body)
    )


def seed_mla_shape(kernel: vyre.KernelOp) -> tuple[int, ...] | None:
    """The MLA shape of `kernel` if it is the seed's MLA decode, else None."""
    skeletons = [
        op for op in kernel.body.block.ops if isinstance(op, vyre.TiledOnlineSoftmaxOp)
    ]
    if len(skeletons) != 1:
        return None
    shape = mla_shape(kernel, skeletons[0])
    seed = shape is not None and is_seed_mla(kernel, shape, mla_dtype(kernel))
    return shape if seed else None


class AbsorbMlaPerHead(RewritePattern):
    """The seed's MLA kernel -> the three kernels of mla_decode_program."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, kernel: vyre.KernelOp, rewriter: PatternRewriter) -> None:
        from vyre_xdsl.decoders import mla_decode_program

        shape = seed_mla_shape(kernel)
        if shape is None:
            return
        program = mla_decode_program(
            *shape, name=kernel.sym_name.data, dtype=mla_dtype(kernel)
        )
        kernels = list(program.body.block.ops)
        for new in kernels:
            new.detach()
        rewriter.replace(kernel, kernels, [])


class AbsorbMla(RewritePattern):
    """The seed's MLA skeleton op -> the absorbed one, with q_lat and o_lat."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: vyre.TiledOnlineSoftmaxOp, rewriter: PatternRewriter
    ) -> None:
        from vyre_xdsl.decoders import mla_decode_absorbed

        kernel = op.parent_op()
        if not isinstance(kernel, vyre.KernelOp):
            return
        shape = seed_mla_shape(kernel)
        if shape is None:
            return
        absorbed = only_kernel(mla_decode_absorbed(*shape, dtype=mla_dtype(kernel)))
        declared = {
            d.sym_name.data: d.result
            for d in kernel.body.block.ops
            if isinstance(d, vyre.BufferOp | vyre.ScratchOp)
        }
        values: dict[SSAValue, SSAValue] = {}
        for new in absorbed.body.block.ops:
            if isinstance(new, vyre.BufferOp | vyre.ScratchOp):
                name = new.sym_name.data
                if name not in declared:  # the latent scratch arrays
                    rewriter.insert(scratch := new.clone(), InsertPoint.before(op))
                    declared[name] = scratch.result
                values[new.result] = declared[name]
            elif isinstance(new, vyre.TiledOnlineSoftmaxOp):
                rewriter.replace(op, new.clone(value_mapper=values))


@dataclass(frozen=True)
class AbsorbMlaPass(ModulePass):
    """Rewrite MLA decode kernels of the seed's form into an absorbed form
    (W_uk folded into the query, W_uv applied once to the latent output):
    one kernel (`kernels=1`) or a program of three (`kernels=3`)."""

    name = "vyre-absorb-mla"

    kernels: int = 1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.kernels not in (1, 3):
            raise VyreError(
                f"vyre-absorb-mla: kernels must be 1 (absorbed in each invocation) "
                f"or 3 (once per head, a program of three kernels), got {self.kernels}"
            )
        pattern = AbsorbMla() if self.kernels == 1 else AbsorbMlaPerHead()
        PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
