"""vyre-absorb-mla: MLA decode with W_uk and W_uv absorbed.

The seed's MLA decode (SEMANTICS.md, Decoder 2) decompresses every key and
every value from the latent cache on the fly: each key costs
head_dim * kv_lora_rank multiply-adds for its score and as many again for
the update.  Matrix products are associative, so the query can be projected
into the latent space once (`q_lat = W_uk q`) and the output projected out
of it once (`out = W_uv o_lat`), where `o_lat` is the online-softmax average
of the latent rows: a key then costs kv_lora_rank + qk_rope_head_dim
multiply-adds for its score and kv_lora_rank for the update
(`vyre_xdsl.mla.mla_decode_absorbed`).

It rewrites what the IR says is MLA decode: `vx.mla_decode` records the
shape it built on its kernel (`vyre.mla = #vyre.mla<...>`, dialects/mla.py),
batched, ragged and paged shapes included.  A kernel is rewritten when it
carries that record, declares exactly the buffers the record implies (names,
bindings, access, shapes; the float ones of one element type) and holds the
seed's plain skeleton over them (the record's items and keys, nothing a
later rewrite adds: no mask, hooks, splits, exp2 or tile classes).  The
fragments are the record's word, not compared: a rewrite that changes what
they compute must drop the record.  The op is then replaced by the absorbed
one of the same shape (`mla_decode_absorbed`, the op's tile size), the
kernel gains the two latent scratch arrays `q_lat` and `o_lat`, and the
record goes (the absorbed form is not absorbed again).  Anything else is
left alone.

`kernels=3` absorbs once per head instead: the seed kernel becomes the
program of `mla_decode_program`, three kernels run in order (q_lat = W_uk q
per head, attention over the latent cache, out = W_uv o_lat per head),
passing q_lat and o_lat through `temp` buffers.  In the one-kernel form
every invocation projects its head's query and output itself, which is
what bounds MLA decode once vyre-split-kv gives a head many invocations.
`rows=N` gives each item of the program's two projections N sequences'
rows of its head (a divisor of the batch; 0, the default, takes
vyre_xdsl.tuning.projection_rows): each weight is read once for them
all, and every row keeps its bits.

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

from vyre_xdsl import tuning
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.mla import MLA_ATTR, MlaAttr
from vyre_xdsl.dtypes import dtype_name
from vyre_xdsl.errors import VyreError, pass_error

# The skeleton's properties in the seed's form (an MLA kernel that a rewrite
# has changed, e.g. split or put in log2 units, has others as well).
SEED_PROPERTIES = {"item_count", "seq_len", "head_dim", "tile_size", "tile_count"}
SEGMENTS = "operandSegmentSizes"


def _buffers(kernel: vyre.KernelOp) -> list[tuple]:
    """(name, binding, access, shape, dtype) of the kernel's buffers, in order."""
    return [(b.sym_name.data, b.binding.value.data, b.access.data, b.logical_shape,
             dtype_name(b.result.type.element_type)) for b in kernel.buffers]


def _is_seed_skeleton(op: vyre.TiledOnlineSoftmaxOp, mla, values: dict) -> bool:
    """Whether `op`, in its kernel, is the plain skeleton `mla_decode`
    builds for `mla` (nothing else in the kernel but buffers and the
    skeleton's three scratch arrays, for 64 lanes)."""
    from vyre_xdsl.skeleton import WORKGROUP_SIZE

    shape = op.shape()
    kernel = op.parent_op()
    assert isinstance(kernel, vyre.KernelOp)
    scratch = [(s.sym_name.data, s.result.type.get_shape()) for s in kernel.scratch_arrays]
    lane_rows = {"q_scratch": mla.head_dim, "score_tile": shape["tile_size"],
                 "o_acc": mla.head_dim}
    ragged = mla.layout.kv_lens
    wanted = SEED_PROPERTIES | ({"items_per_seq"} if ragged else set())
    return (
        kernel.lanes == WORKGROUP_SIZE
        and kernel.items == mla.items
        and scratch == [(name, (WORKGROUP_SIZE * n,)) for name, n in lane_rows.items()]
        and len(kernel.body.block.ops) == len(values) + len(scratch) + 1
        and set(op.properties) - {SEGMENTS} == wanted
        and (shape["item_count"], shape["seq_len"], shape["head_dim"])
        == (mla.items, mla.seq_len, mla.head_dim)
        and (not ragged or op.seq_items == mla.num_heads)
        and op.q == values["q"] and op.out == values["out"]
        and op.kv_lens == values.get("kv_lens") and op.lse is None and not op.partials
        and not op.has_mask
        and op.hooks_empty
    )


def seed_mla(kernel: vyre.KernelOp) -> dict[str, object] | None:
    """The builder arguments of the seed MLA decode `kernel` says it is
    (the record's, the skeleton's tile size, the buffers' dtype), if its
    buffers and skeleton agree with its record; None otherwise."""
    from vyre_xdsl.mla import check_mla

    record = kernel.attributes.get(MLA_ATTR)
    skeletons = [op for op in kernel.body.block.ops if isinstance(op, vyre.TiledOnlineSoftmaxOp)]
    if not isinstance(record, MlaAttr) or len(skeletons) != 1:
        return None
    (op,) = skeletons
    buffers = _buffers(kernel)
    dtype = {name: dtype for name, *_, dtype in buffers}.get("q")  # the builder's
    arguments = {**record.arguments(), "tile_size": op.shape()["tile_size"], "dtype": dtype}
    try:
        mla = check_mla(**arguments)
    except VyreError:
        return None
    implied = [(b.name, binding, b.access, b.shape, b.dtype or dtype)
               for binding, b in enumerate(mla.buffers())]
    values = {b.sym_name.data: b.result for b in kernel.buffers}
    if buffers != implied or not _is_seed_skeleton(op, mla, values):
        return None
    return arguments


@dataclass
class AbsorbMlaPerHead(RewritePattern):
    """The seed's MLA kernel -> the three kernels of mla_decode_program,
    with `rows` rows an item of its projections (0: the tuning's)."""

    rows: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, kernel: vyre.KernelOp, rewriter: PatternRewriter) -> None:
        from vyre_xdsl.mla import check_mla, mla_decode_program

        arguments = seed_mla(kernel)
        if arguments is None:
            return
        mla = check_mla(**arguments)
        rows = self.rows or tuning.projection_rows(mla.batch)
        if reason := mla.projection_rows_problem(rows):
            raise pass_error(kernel, f"vyre-absorb-mla: {reason}")
        program = mla_decode_program(**arguments, name=kernel.sym_name.data, rows=rows)
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
        from vyre_xdsl.mla import mla_decode_absorbed

        kernel = op.parent_op()
        if not isinstance(kernel, vyre.KernelOp):
            return
        arguments = seed_mla(kernel)
        if arguments is None:
            return
        (absorbed,) = mla_decode_absorbed(**arguments).body.block.ops
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
        del kernel.attributes[MLA_ATTR]


@dataclass(frozen=True)
class AbsorbMlaPass(ModulePass):
    """Rewrite MLA decode kernels of the seed's form into an absorbed form
    (W_uk folded into the query, W_uv applied once to the latent output):
    one kernel (`kernels=1`) or a program of three (`kernels=3`)."""

    name = "vyre-absorb-mla"

    kernels: int = 1
    rows: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.kernels not in (1, 3):
            raise VyreError(
                f"vyre-absorb-mla: kernels must be 1 (absorbed in each invocation) "
                f"or 3 (once per head, a program of three kernels), got {self.kernels}"
            )
        if self.rows < 0 or (self.rows and self.kernels != 3):
            raise VyreError(
                f"vyre-absorb-mla: rows (rows of a head an item of the projections, 0 for "
                f"the tuning's) must be >= 0 and is kernels=3's option, got rows={self.rows} "
                f"with kernels={self.kernels}"
            )
        pattern = AbsorbMla() if self.kernels == 1 else AbsorbMlaPerHead(self.rows)
        PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
