"""A small emitter for arith/math/scf/memref IR, used by fragments and passes.

Every helper inserts at the builder's insertion point and returns the new
SSA value, so fragment code reads like the formulas of SEMANTICS.md.  Index
arithmetic is on `index`; float arithmetic is f32 with no fast-math.
Loads of half-precision buffers are widened to f32 and f32 stores to them
rounded here, so every fragment and the recurrence compute in f32.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from xdsl.builder import Builder
from xdsl.dialects import arith, gpu, math, memref, scf, vector
from xdsl.dialects.builtin import FloatAttr, IndexType, IntegerAttr, MemRefType, f32, i32, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint

from vyre_xdsl import trace
from vyre_xdsl.checks import is_integer
from vyre_xdsl.dialects.constants import I32_MAX, U32_MAX
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.gpu_shuffle import ShuffleMode, ShuffleOp
from vyre_xdsl.dialects.vector_from_elements import FromElementsOp
from vyre_xdsl.errors import VyreError
from vyre_xdsl.loop_bounds import MAX_TRIPS_ATTR
from vyre_xdsl.dtypes import is_half

if TYPE_CHECKING:
    from typing_extensions import Self

Value = SSAValue | Operation
LoopBody = Callable[["IRBuilder", SSAValue, Sequence[SSAValue]], Sequence[Value]]


def _not_a_value(value: object, what: str) -> VyreError:
    hint = " (pass f.buffer(name), not the name)" if isinstance(value, str) else ""
    return VyreError(
        f"{what} must be an IR value (a fragment argument, f.buffer(name), the "
        f"result of a helper such as f.load or f.addf, or a traced value), got "
        f"{value!r} ({type(value).__name__}){hint} at {trace.user_location()}"
    )


def _v(value: Value) -> SSAValue:
    if isinstance(value, trace.Traced):
        return value.ssa
    if not isinstance(value, SSAValue | Operation):
        raise _not_a_value(value, "an operand")
    return SSAValue.get(value)


def _index(value: Value, builder: IRBuilder | None = None) -> SSAValue:
    """An `index` operand: traced integers are cast, and with a `builder`
    Python ints become constants."""
    if isinstance(value, trace.Traced):
        return trace.as_index(value)
    if builder is not None and is_integer(value):
        return builder.index(value)
    if not isinstance(value, SSAValue | Operation):
        raise _not_a_value(value, "an index or loop bound")
    ssa = SSAValue.get(value)
    if not isinstance(ssa.type, IndexType):
        raise VyreError(
            f"an index or loop bound must have type index (or be a traced "
            f"integer), got a value of type {ssa.type} at {trace.user_location()}"
        )
    return ssa


def _memref(ref: Value) -> SSAValue:
    """A memref operand (a buffer, scratch array or alloc)."""
    ssa = _v(ref)
    if not isinstance(ssa.type, MemRefType):
        raise VyreError(
            f"loads and stores take a buffer or scratch array (f.buffer(name), "
            f"f.o_acc, ...), got a value of type {ssa.type} at {trace.user_location()}"
        )
    return ssa


def _carried(values, expected, what: str) -> list[SSAValue]:
    """What a loop body or a branch returned, as SSA values: a list with one
    value per carried value (`expected`: values or types; None: any)."""
    if values is None and not expected:
        values = []
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise VyreError(
            f"{what} must return a list of values (one per carried value, [] for "
            f"none), got {type(values).__name__} at {trace.user_location()}"
        )
    values = [_v(v) for v in values]
    if expected is not None:
        want = [e.type if isinstance(e, SSAValue) else e for e in expected]
        got = [v.type for v in values]
        if got != want:
            raise VyreError(
                f"{what} returned values of types ({', '.join(map(str, got))}) but "
                f"must return ({', '.join(map(str, want))}): one per carried value, "
                f"in order, at {trace.user_location()}"
            )
    return values


class IRBuilder:
    """Emit ops through an xDSL `Builder`: one given (a pattern's
    `PatternRewriter` is one, so the rewriter sees every op inserted), or a
    plain one at an insertion point."""

    def __init__(self, where: InsertPoint | Builder) -> None:
        self.builder = where if isinstance(where, Builder) else Builder(where)
        # what this builder was given to, once that has returned (close)
        self.returned: str | None = None

    def close(self, given_to: str) -> None:
        """Refuse ops from now on: the callback it was given to (`given_to`)
        has returned, and its block ends with a terminator."""
        self.returned = given_to

    def at(self, insertion_point: InsertPoint) -> Self:
        """This builder (with whatever context a subclass carries) emitting
        at another insertion point: nested loop bodies use it.  Their blocks
        are not in the IR yet, so a plain Builder fills them; the loop that
        holds them goes through this builder."""
        nested = copy.copy(self)
        nested.builder = Builder(insertion_point)
        return nested

    def emit(self, op: Operation) -> Operation:
        if self.returned is not None:
            raise VyreError(
                f"a builder was used after {self.returned} it was given to had returned "
                f"(kept in a variable?); build {op.name} inside that callback, with "
                f"the builder it receives"
            )
        self.builder.insert(op)
        return op

    def _result(self, op: Operation, hint: str | None = None) -> SSAValue:
        self.emit(op)
        result = op.results[0]
        if hint:
            result.name_hint = hint
        return result

    # -- constants -------------------------------------------------------

    def index(self, value: int) -> SSAValue:
        if not is_integer(value) or not 0 <= value <= U32_MAX:
            raise VyreError(
                f"an index constant must be an integer in [0, {U32_MAX}] (index is "
                f"a 32-bit unsigned integer on the device), got {value!r} at "
                f"{trace.user_location()}"
            )
        return self._result(arith.ConstantOp(IntegerAttr(int(value), IndexType())))

    def i32(self, value: int) -> SSAValue:
        return self._result(arith.ConstantOp(IntegerAttr(int(value), i32)))

    def f32(self, value: float) -> SSAValue:
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise VyreError(
                f"an f32 constant must be a Python number, got {value!r} "
                f"({type(value).__name__}) at {trace.user_location()}"
            )
        return self._result(arith.ConstantOp(FloatAttr(float(value), f32)))

    # -- index arithmetic --------------------------------------------------

    def addi(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.AddiOp(_v(a), _v(b)), hint)

    def subi(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.SubiOp(_v(a), _v(b)), hint)

    def muli(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.MuliOp(_v(a), _v(b)), hint)

    def minui(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.MinUIOp(_v(a), _v(b)), hint)

    def maxui(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.MaxUIOp(_v(a), _v(b)), hint)

    def divui(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.DivUIOp(_v(a), _v(b)), hint)

    def remui(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.RemUIOp(_v(a), _v(b)), hint)

    def cmpi(self, a: Value, b: Value, predicate: str) -> SSAValue:
        return self._result(arith.CmpiOp(_v(a), _v(b), predicate))

    def andi(self, a: Value, b: Value) -> SSAValue:
        return self._result(arith.AndIOp(_v(a), _v(b)))

    def ori(self, a: Value, b: Value) -> SSAValue:
        return self._result(arith.OrIOp(_v(a), _v(b)))

    def flat_index(self, row: Value, stride: int, offset: Value) -> SSAValue:
        """`row * stride + offset`: a row-major element index."""
        return self.addi(self.muli(row, self.index(stride)), offset)

    # -- f32 arithmetic ----------------------------------------------------

    def addf(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.AddfOp(_v(a), _v(b)), hint)

    def subf(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.SubfOp(_v(a), _v(b)), hint)

    def mulf(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.MulfOp(_v(a), _v(b)), hint)

    def divf(self, a: Value, b: Value, hint: str | None = None) -> SSAValue:
        return self._result(arith.DivfOp(_v(a), _v(b)), hint)

    def exp2(self, a: Value, hint: str | None = None) -> SSAValue:
        return self._result(math.Exp2Op(_v(a)), hint)

    def cmpf(self, a: Value, b: Value, predicate: str) -> SSAValue:
        return self._result(arith.CmpfOp(_v(a), _v(b), predicate))

    def select(self, cond: Value, a: Value, b: Value, hint: str | None = None):
        return self._result(arith.SelectOp(_v(cond), _v(a), _v(b)), hint)

    def exp(self, a: Value, hint: str | None = None) -> SSAValue:
        return self._result(math.ExpOp(_v(a)), hint)

    def log(self, a: Value, hint: str | None = None) -> SSAValue:
        return self._result(math.LogOp(_v(a)), hint)

    def absf(self, a: Value) -> SSAValue:
        return self._result(math.AbsFOp(_v(a)))

    # -- stability ops -------------------------------------------------------

    def bounded_score(self, a: Value) -> SSAValue:
        return self._result(vyre.BoundedScoreOp(_v(a)))

    def bounded_exp_arg(self, a: Value, nonpositive: bool = False,
                        log2: bool = False) -> SSAValue:
        """`nonpositive`: the caller promises `a` is <= 0, -inf or NaN;
        `log2`: `a` is in log2 units, an exp2's (vyre.bounded_exp_arg)."""
        return self._result(vyre.BoundedExpArgOp(_v(a), nonpositive, log2))

    def positive_denominator(self, a: Value) -> SSAValue:
        return self._result(vyre.PositiveDenominatorOp(_v(a)), "denom")

    def flush_tiny(self, a: Value) -> SSAValue:
        return self._result(vyre.FlushTinyOp(_v(a)))

    # -- subgroups ---------------------------------------------------------

    def subgroup_width(self) -> SSAValue:
        """The subgroup size as the i32 width of a shuffle (what SPIR-V's
        shuffles span, and the only width MLIR's SPIR-V conversion takes)."""
        size = self._result(gpu.SubgroupSizeOp())
        return self._result(arith.IndexCastOp(size, i32))

    def shuffle_xor(self, value: Value, lanes_apart: int, width: SSAValue) -> SSAValue:
        """`value` of the lane `lanes_apart` away (xor) in the subgroup."""
        offset = self._result(arith.ConstantOp(IntegerAttr(lanes_apart, i32)))
        return self._result(ShuffleOp(_v(value), offset, width, ShuffleMode.XOR))

    # -- memory ------------------------------------------------------------

    def load(self, ref: Value, index: Value) -> SSAValue:
        """Element `index` of `ref`; of a half-precision (f16/bf16) buffer,
        widened exactly to f32 (arith.extf): fragments compute in f32."""
        value = self._result(memref.LoadOp.get(_memref(ref), [_index(index, self)]))
        if is_half(value.type):
            return self._result(arith.ExtFOp(value, f32))
        return value

    def load_index(self, ref: Value, index: Value) -> SSAValue:
        """Element `index` of an i32 buffer as an `index` (arith.index_cast
        of the loaded i32: a negative value wraps, clamp it first with
        `load` and arith.maxsi where that matters)."""
        value = self._result(memref.LoadOp.get(_memref(ref), [_index(index, self)]))
        return self._result(arith.IndexCastOp(value, IndexType()))

    def load_clamped_index(self, ref: Value, index: Value, high: int) -> SSAValue:
        """Element `index` of an i32 buffer clamped to [0, high] (in i32,
        arith.maxsi/minsi) as an `index`: a value out of range, whatever it
        is, gives an in-range index (garbage in, never an access outside an
        array sized by `high`)."""
        from xdsl.dialects.builtin import i32

        value = self._result(memref.LoadOp.get(_memref(ref), [_index(index, self)]))
        low = self._result(arith.ConstantOp(IntegerAttr(0, i32)))
        top = self._result(arith.ConstantOp(IntegerAttr(min(high, I32_MAX), i32)))
        value = self._result(arith.MaxSIOp(value, low))
        value = self._result(arith.MinSIOp(value, top))
        return self._result(arith.IndexCastOp(value, IndexType()))

    def _stored(self, value: Value, ref: Value) -> SSAValue:
        """`value` as `ref` holds it: an f32 value for a half-precision
        buffer rounded once, to nearest even (arith.truncf)."""
        value = _v(value)
        element = _memref(ref).type.element_type
        if value.type == f32 and is_half(element):
            value = self._result(arith.TruncFOp(value, element))
        return value

    def store(self, value: Value, ref: Value, index: Value) -> None:
        """Store `value` at element `index` of `ref` (rounded: `_stored`)."""
        self.emit(memref.StoreOp.get(self._stored(value, ref), _memref(ref),
                                     [_index(index, self)]))

    def store_vector(self, values: Sequence[Value], ref: Value, index: Value) -> None:
        """Store `values` at elements `index`, `index + 1`, ... of `ref` with
        one vector.store (each rounded as `store` rounds it)."""
        vec = self._result(FromElementsOp([self._stored(value, ref) for value in values]))
        self.emit(vector.StoreOp(vec, _memref(ref), [_index(index, self)]))

    # -- control flow ------------------------------------------------------

    def loop(
        self,
        lower: Value | int,
        upper: Value | int,
        body: LoopBody,
        iter_args: Sequence[Value] = (),
        hint: str | None = None,
        attributes: dict[str, Attribute] | None = None,
        max_trips: int | None = None,
    ) -> list[SSAValue]:
        """`scf.for %i = lower to upper step 1` carrying `iter_args`; `body`
        gets (builder, %i, iteration values) and returns the next values;
        `attributes` go on the loop.  `max_trips`: a promise that it runs at
        most that many trips, where `upper` is only known at run time
        (`vyre.max_trips`: what bounds it for lavapipe's loop limit; the
        interpreter holds the loop to it)."""
        if max_trips is not None:
            if not is_integer(max_trips) or not 0 <= max_trips <= U32_MAX:
                raise VyreError(f"max_trips must be an integer in [0, {U32_MAX}], "
                                f"got {max_trips!r}")
            attributes = {**(attributes or {}),
                          MAX_TRIPS_ATTR: IntegerAttr(int(max_trips), i64)}
        lower_v, upper_v = _index(lower, self), _index(upper, self)
        step = self.index(1)
        inits = [self.f32(v) if isinstance(v, float) else _v(v) for v in iter_args]
        if not callable(body):
            raise VyreError(f"the loop body must be a function, got {type(body).__name__}")
        block = Block(arg_types=[IndexType(), *(v.type for v in inits)])
        if hint:
            block.args[0].name_hint = hint
        inner = self.at(InsertPoint.at_end(block))
        with trace.building(inner):
            next_values = body(inner, block.args[0], block.args[1:])
        next_values = _carried(next_values, inits, "the loop body")
        inner.emit(scf.YieldOp(*next_values))
        inner.close("the loop body")
        op = scf.ForOp(lower_v, upper_v, step, inits, Region(block))
        op.attributes.update(attributes or {})
        self.emit(op)
        return list(op.results)

    def splice(self, region: Region, args: Sequence[SSAValue]) -> list[SSAValue]:
        """Insert a copy of the single-block `region` (a fragment, a mask),
        its arguments replaced by `args`; return what its `vyre.yield`
        yields."""
        block = region.clone().block
        terminator = block.last_op
        assert isinstance(terminator, vyre.YieldOp)
        values = list(terminator.values)
        terminator.detach()
        terminator.erase()
        for arg, value in zip(block.args, args, strict=True):
            arg.replace_all_uses_with(value)
        for inner in list(block.ops):
            inner.detach()
            self.emit(inner)
        return values

    def if_then(self, cond: Value, then: Callable[[IRBuilder], None]) -> None:
        """`scf.if %cond { then }` with no results."""
        block = Block()
        inner = self.at(InsertPoint.at_end(block))
        with trace.building(inner):
            then(inner)
        inner.close("the branch of if_then")
        block.add_op(scf.YieldOp())
        self.emit(scf.IfOp(_v(cond), [], Region(block)))

    def if_else(
        self,
        cond: Value,
        then: Callable[[IRBuilder], Sequence[Value]],
        otherwise: Callable[[IRBuilder], Sequence[Value]],
    ) -> list[SSAValue]:
        """`scf.if %cond -> (...)` yielding what each branch returns."""
        regions = []
        yielded_types = None
        for branch in (then, otherwise):
            block = Block()
            inner = self.at(InsertPoint.at_end(block))
            with trace.building(inner):
                returned = branch(inner)
            inner.close("the branch of if_else")
            if yielded_types is None:
                values = _carried(returned, None, "the then-branch of if_else")
            else:
                values = _carried(returned, yielded_types, "the else-branch of if_else")
            block.add_op(scf.YieldOp(*values))
            yielded_types = [v.type for v in values]
            regions.append(Region(block))
        assert yielded_types is not None
        op = scf.IfOp(_v(cond), yielded_types, regions[0], regions[1])
        self.emit(op)
        return list(op.results)
