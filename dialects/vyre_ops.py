"""The small vyre ops: `vyre.merge_splits` (the merge of a split left to
its own kernel), the invocation indices that vyre-inline-fragments leaves
for the GPU lowering, and the stability helpers of SEMANTICS.md."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    IndexType,
    IntegerAttr,
    MemRefType,
    UnitAttr,
    f32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import HasParent, Pure
from xdsl.utils.exceptions import VerifyException

from vyre_xdsl.dialects.constants import U32_MAX, score_floor
from vyre_xdsl.dialects.vyre_checks import (
    Int64,
    OptionalInt64,
    _check_buffer_vector,
    _check_f32_vector,
    _int,
)
from vyre_xdsl.dialects.vyre_kernel import KernelOp, Skeleton, sized_buffer_operand


MERGE_FIELDS = ("item_count", "splits", "head_dim")


@irdl_op_definition
class MergeSplitsOp(IRDLOperation):
    """The merge of a flash-decoding split left to its own kernel (the
    skeleton's `partials`): for every item and output dim d,

        out[item, d] = the workgroup merge of SplitMerge over the
                       `splits` partial (m, l, o[row, d]), rows item*splits + s

    in the same order of operations as the merge in workgroup memory, so
    that both give the same bits.  An invocation merges `dims` (1 unless
    given) of an item's dims, head_dim / dims apart, combining the splits'
    m and l once for them: the kernel runs item_count * head_dim / dims
    items.  With `teams` T > 1 (a power of two dividing `splits`) T
    invocations of a workgroup merge those dims together: invocation t
    takes the t-th run of splits / T neighbouring splits, in order (their
    m and l are neighbours too), and after a barrier the first
    adds the T runs' sums pairwise (numerics.pairwise_total; the oracle's
    `merge_teams`), so that no invocation walks every split; the kernel
    then runs T times the items, its workgroups holding T teams of
    lanes / T neighbouring columns each.  vyre-inline-fragments expands it.
    With `lse(%lse)` the invocation of d = 0 also writes the item's
    log-sum-exp, as the split skeleton of `keys` keys would have (its
    partials' weights carry partial_weight_scale(keys), which it undoes).

        vyre.merge_splits m(%m) l(%l) o(%o) out(%out)
            item_count 16 splits 64 head_dim 512 : (memref<1024xf32>, ...)
        vyre.merge_splits m(%m) l(%l) o(%o) out(%out)
            item_count 16 splits 64 head_dim 512 dims 8 : (...)
        vyre.merge_splits m(%m) l(%l) o(%o) out(%out)
            item_count 32 splits 512 head_dim 128 teams 8 : (...)
        vyre.merge_splits m(%m) l(%l) o(%o) out(%out) lse(%lse) keys 4096
            item_count 16 splits 64 head_dim 512 : (..., memref<16xf32>)
    """

    name = "vyre.merge_splits"

    m = operand_def(MemRefType)
    l = operand_def(MemRefType)  # noqa: E741 - the recurrence's name
    o = operand_def(MemRefType)
    out = operand_def(MemRefType)
    lse = opt_operand_def(MemRefType)
    item_count = prop_def(IntegerAttr[I64])
    splits = prop_def(IntegerAttr[I64])
    head_dim = prop_def(IntegerAttr[I64])
    dims = opt_prop_def(IntegerAttr[I64])
    teams = opt_prop_def(IntegerAttr[I64])
    keys = opt_prop_def(IntegerAttr[I64])
    exp2 = opt_prop_def(UnitAttr)

    traits = traits_def(HasParent(KernelOp), Skeleton())

    assembly_format = (
        "`m` `(` $m `)` `l` `(` $l `)` `o` `(` $o `)` `out` `(` $out `)` "
        "(`lse` `(` $lse^ `)` `keys` custom<Int64>($keys))? "
        "`item_count` custom<Int64>($item_count) `splits` custom<Int64>($splits) "
        "`head_dim` custom<Int64>($head_dim) (`dims` custom<OptionalInt64>($dims)^)? "
        "(`teams` custom<OptionalInt64>($teams)^)? "
        "(`exp2` $exp2^)? attr-dict-with-keyword "
        "`:` `(` type($m) `,` type($l) `,` type($o) `,` type($out) "
        "(`,` type($lse)^)? `)`"
    )
    custom_directives = (Int64, OptionalInt64)

    def __init__(
        self, m: SSAValue, l: SSAValue, o: SSAValue, out: SSAValue,  # noqa: E741
        lse: SSAValue | None = None, *,
        item_count: int, splits: int, head_dim: int, keys: int | None = None,
        exp2: bool = False, dims: int = 1, teams: int = 1,
    ) -> None:
        properties: dict[str, Attribute] = {
            "item_count": IntegerAttr(item_count, i64),
            "splits": IntegerAttr(splits, i64),
            "head_dim": IntegerAttr(head_dim, i64),
        }
        if dims != 1:
            properties["dims"] = IntegerAttr(dims, i64)
        if teams != 1:
            properties["teams"] = IntegerAttr(teams, i64)
        if keys is not None:
            properties["keys"] = IntegerAttr(keys, i64)
        if exp2:
            properties["exp2"] = UnitAttr()
        super().__init__(operands=[m, l, o, out, [lse] if lse else []],
                         properties=properties)

    def shape(self) -> dict[str, int]:
        return {field: _int(getattr(self, field)) for field in MERGE_FIELDS}

    @property
    def dims_each(self) -> int:
        """The dims an invocation merges."""
        return 1 if self.dims is None else _int(self.dims)

    @property
    def team_count(self) -> int:
        """The invocations that merge each column of dims together."""
        return 1 if self.teams is None else _int(self.teams)

    @property
    def columns(self) -> int:
        """The (item, first dim) columns the merge writes, `dims` each."""
        shape = self.shape()
        return shape["item_count"] * shape["head_dim"] // self.dims_each

    def verify_(self) -> None:
        shape = self.shape()
        for field, value in shape.items():
            if not 1 <= value <= U32_MAX:
                raise VerifyException(f"'{field}' must be in [1, 2^32), got {value}")
        if (self.lse is None) != (self.keys is None):
            raise VerifyException(
                "'lse' and 'keys' go together: the log-sum-exp undoes the weight scale "
                "of the split skeleton's keys (give both, or neither)"
            )
        if self.keys is not None and not 1 <= _int(self.keys) <= U32_MAX:
            raise VerifyException(f"'keys' must be in [1, 2^32), got {_int(self.keys)}")
        if self.lse is not None:
            sized_buffer_operand(
                self.lse, "lse", ("write", "temp"), shape["item_count"],
                f"one log-sum-exp per item needs {shape['item_count']}",
                vector=_check_f32_vector,
            )
        rows = shape["item_count"] * shape["splits"]
        for role, value, access, count in (
            ("m", self.m, ("temp",), rows),
            ("l", self.l, ("temp",), rows),
            ("o", self.o, ("temp",), rows * shape["head_dim"]),
            ("out", self.out, ("write", "temp"), shape["item_count"] * shape["head_dim"]),
        ):
            sized_buffer_operand(
                value, role, access, count,
                f"the merge of {shape['item_count']} items x {shape['splits']} splits "
                f"x {shape['head_dim']} dims needs {count}",
                vector=_check_buffer_vector if role == "out" else _check_f32_vector,
            )
        dims = self.dims_each
        if not 1 <= dims <= shape["head_dim"] or shape["head_dim"] % dims:
            raise VerifyException(
                f"'dims' ({dims}) must divide head_dim ({shape['head_dim']}): an "
                f"invocation merges that many of an item's dims"
            )
        kernel = self.parent_op()
        assert isinstance(kernel, KernelOp)
        teams = self.team_count
        if teams < 1 or teams & (teams - 1) or shape["splits"] % teams:
            raise VerifyException(
                f"'teams' ({teams}) must be a power of two dividing splits "
                f"({shape['splits']}): each team merges as many splits"
            )
        if teams > 1 and (kernel.lanes % teams or self.columns % (kernel.lanes // teams)):
            raise VerifyException(
                f"a workgroup of {kernel.lanes} lanes holds {teams} teams of the same "
                f"columns: 'teams' must divide the lanes, and lanes / teams the "
                f"{self.columns} columns (item_count * head_dim / dims)"
            )
        invocations = self.columns * teams
        if kernel.items != invocations:
            each = "(item, dim)" if dims == 1 else f"{dims} dims of an item"
            team = "" if teams == 1 else f" and team ({teams})"
            formula = "item_count * head_dim" + ("" if dims == 1 else " / dims") + (
                "" if teams == 1 else " * teams")
            raise VerifyException(
                f"the merge runs one invocation per {each}{team}: set the kernel's "
                f"items to {formula} = {invocations}, not {kernel.items}"
            )


# --------------------------------------------------------------------------
# Invocation indices (what vyre-inline-fragments leaves for the GPU lowering)
# --------------------------------------------------------------------------


class InvocationIndexOp(IRDLOperation):
    """An index of this invocation along x (`HINT` names its value)."""

    HINT: ClassVar[str]
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__(result_types=[IndexType()])
        self.result.name_hint = self.HINT


@irdl_op_definition
class ItemIndexOp(InvocationIndexOp):
    """The global invocation index along x: the item this lane computes."""

    name = "vyre.item_index"
    HINT: ClassVar[str] = "item"


@irdl_op_definition
class LaneIndexOp(InvocationIndexOp):
    """The lane index within the workgroup along x."""

    name = "vyre.lane_index"
    HINT: ClassVar[str] = "lane"


# --------------------------------------------------------------------------
# Stability helpers (NaN is evidence: it is never hidden)
# --------------------------------------------------------------------------


class StabilityOp(IRDLOperation):
    """An f32 -> f32 stability helper of SEMANTICS.md."""

    T: ClassVar = VarConstraint("T", AnyAttr())
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input)"

    def __init__(self, value: SSAValue | Operation) -> None:
        super().__init__(operands=[value], result_types=[SSAValue.get(value).type])

    def verify_(self) -> None:
        if self.input.type != f32:
            raise VerifyException(
                f"takes an f32 score, got {self.input.type}; the stability "
                f"helpers are defined on f32 only (convert the value first)"
            )


class FlooredOp(StabilityOp):
    """A stability helper with SEMANTICS.md's -80, which `log2` (a value in
    log2 units) makes -80 * log2(e)."""

    log2 = opt_prop_def(UnitAttr)

    @property
    def floor(self) -> float:
        return score_floor(self.log2 is not None)


@irdl_op_definition
class BoundedScoreOp(FlooredOp):
    """`v if isnan(v) else finite_or(v, -80.0)`

    `log2`: the score is in log2 units (vyre-use-exp2 folded log2(e) into
    it)."""

    name = "vyre.bounded_score"

    assembly_format = "(`log2` $log2^)? $input attr-dict `:` type($input)"

    def __init__(self, value: SSAValue | Operation, log2: bool = False) -> None:
        super().__init__(value)
        if log2:
            self.log2 = UnitAttr()


@irdl_op_definition
class BoundedExpArgOp(FlooredOp):
    """`v if isnan(v) else clamp(finite_or(v, -80.0), -80.0, 0.0)`

    `nonpositive` is its producer's promise that the argument is <= 0, -inf
    or NaN wherever the result is used; the value is the same, and the
    expansion needs only the lower bound.  `log2`: the argument is in log2
    units (an exp2's)."""

    name = "vyre.bounded_exp_arg"

    nonpositive = opt_prop_def(UnitAttr)

    assembly_format = ("(`nonpositive` $nonpositive^)? (`log2` $log2^)? $input attr-dict "
                       "`:` type($input)")

    def __init__(self, value: SSAValue | Operation, nonpositive: bool = False,
                 log2: bool = False) -> None:
        super().__init__(value)
        if nonpositive:
            self.nonpositive = UnitAttr()
        if log2:
            self.log2 = UnitAttr()


@irdl_op_definition
class PositiveDenominatorOp(StabilityOp):
    """`v if isnan(v) else (v if isfinite(v) and v > MIN_POSITIVE else MIN_POSITIVE)`"""

    name = "vyre.positive_denominator"


@irdl_op_definition
class FlushTinyOp(StabilityOp):
    """`0.0 if abs(v) <= MIN_POSITIVE else v` (NaN passes through)"""

    name = "vyre.flush_tiny"


STABILITY_OPS = (BoundedScoreOp, BoundedExpArgOp, PositiveDenominatorOp, FlushTinyOp)
