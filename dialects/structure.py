"""Structural rules of kernels that xDSL's verifiers leave out.

Used by the vyre dialect's verifiers (vyre input) and by the loader of
lowered kernels (`vyre_xdsl.kernel_info`, for vx.run, vyre-run and the
SPIR-V emitter), so that IR which upstream MLIR or an executor would reject
or run wrongly is refused first, naming the op and the fix:

- SSA dominance: a value is defined before every use (xDSL's parser takes
  forward references, and no xDSL verifier checks the order);
- no function, module or kernel definition inside a kernel;
- no store into a buffer declared `read`;
- the kernels of a module agree on the buffers they share.

Each check raises a VerifyException whose `op` attribute is the offending
op, so the tools locate the diagnostic at the user's line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

# Ops that define functions, modules or kernels: none may sit in a kernel.
DEFINITIONS = ("func.func", "gpu.func", "gpu.module", "builtin.module", "vyre.kernel")
# Ops whose body is a graph region (MLIR): no order among its ops.
GRAPH_REGIONS = ("builtin.module", "gpu.module")
STORES = ("memref.store", "vector.store")


def op_error(op: Operation, message: str) -> VerifyException:
    """A VerifyException that carries `op` (the tools locate it there)."""
    error = VerifyException(message)
    error.op = op  # type: ignore[attr-defined]
    return error


def value_name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else f"a value of type {value.type}"


class _Order:
    """Positions of ops in their blocks, computed once per block."""

    def __init__(self) -> None:
        self.positions: dict[Block, dict[Operation, int]] = {}

    def index(self, op: Operation) -> int:
        block = op.parent_block()
        assert block is not None
        table = self.positions.get(block)
        if table is None:
            table = {o: i for i, o in enumerate(block.ops)}
            self.positions[block] = table
        return table[op]


def _enclosing(op: Operation) -> Iterable[tuple[Block, Operation]]:
    """(block, op of that block that holds `op`) from `op` outwards."""
    current: Operation | None = op
    while current is not None:
        block = current.parent_block()
        if block is None:
            return
        yield block, current
        current = block.parent_op()


def _dominates(value: SSAValue, user: Operation, order: _Order) -> bool:
    if isinstance(value, BlockArgument):
        return any(block is value.block for block, _ in _enclosing(user))
    if _never_defined(value):
        return False
    definition = value.owner
    assert isinstance(definition, Operation)
    home = definition.parent_block()
    for block, holder in _enclosing(user):
        if holder is definition:
            return False  # used inside (or by) the op that defines it
        if block is home:
            parent = block.parent_op()
            if parent is not None and parent.name in GRAPH_REGIONS:
                return True
            return order.index(definition) < order.index(holder)
        region = block.parent
        if home is not None and region is not None and home.parent is region:
            # another block of the same (multi-block) region: its CFG decides,
            # which the lowered form never has; leave it to MLIR
            return True
    return False


def _never_defined(value: SSAValue) -> bool:
    """A forward reference the parser never resolved (xDSL leaves one in
    place where the name is not defined in a region it checks)."""
    return not isinstance(value, BlockArgument) and not isinstance(
        getattr(value, "op", None), Operation
    )


def check_dominance(root: Operation) -> None:
    """Every operand of every op inside `root` is defined before its use:
    earlier in the same block or in an enclosing one, or as an argument of
    an enclosing block."""
    order = _Order()
    for op in root.walk():
        if op is root:
            continue
        for index, operand in enumerate(op.operands):
            if not _dominates(operand, op, order):
                definition = None if _never_defined(operand) else operand.owner
                if definition is None:
                    problem = "uses a value not defined in this block or an enclosing one"
                elif definition is op:
                    problem = "uses its own result"
                elif isinstance(definition, Operation) and definition.is_ancestor(op):
                    problem = f"uses a result of the enclosing '{definition.name}'"
                else:
                    problem = "uses a value before it is defined (or outside its region)"
                raise op_error(
                    op,
                    f"{problem}: operand {index} ({value_name(operand)}); "
                    f"define every value before its first use, in the same block or "
                    f"an enclosing one",
                )


def check_no_definitions(root: Operation, what: str) -> None:
    """No function, module or kernel is defined inside `root`."""
    for op in root.walk():
        if op is not root and op.name in DEFINITIONS:
            raise op_error(
                op,
                f"defined inside {what}: kernels cannot define or call functions, "
                f"modules or kernels; define it at the top level of the module, or "
                f"inline its body",
            )


def check_no_stores_to(
    root: Operation, is_read_only: Callable[[SSAValue], str | None]
) -> None:
    """No memref.store / vector.store inside `root` writes a buffer for
    which `is_read_only` gives a name (a `read` buffer)."""
    for op in root.walk():
        if op.name not in STORES:
            continue
        target = op.operands[1]
        name = is_read_only(target)
        if name is not None:
            raise op_error(
                op,
                f"writes buffer '{name}', which is declared read (an "
                f"input); declare it \"write\" or \"temp\", or store into a scratch "
                f"array",
            )


def check_fragment_barriers(
    regions: Iterable, every_lane_runs: bool, lanes_note: str
) -> None:
    """A gpu.barrier in a fragment must be reached by every lane of the
    workgroup: only where no lane skips the item (`every_lane_runs`: the
    items fill every workgroup) and not under an scf.if or inside an
    scf.for whose condition or bounds depend on the item or the lane."""
    for region in regions:
        block = region.block
        varying = set(block.args[:2])  # every fragment starts (%item, %lane, ...)
        for op in region.walk():
            if op.name in ("vyre.item_index", "vyre.lane_index") or any(
                operand in varying for operand in op.operands
            ):
                varying.update(op.results)
            if op.name != "gpu.barrier":
                continue
            if not every_lane_runs:
                raise op_error(
                    op,
                    f"in a fragment of a kernel whose last workgroup has "
                    f"lanes without an item ({lanes_note}): those lanes never reach "
                    f"it; make item_count a multiple of the workgroup size, or "
                    f"exchange values without a barrier",
                )
            parent = op.parent_op()
            while parent is not None and parent.name != "vyre.tiled_online_softmax":
                if parent.name in ("scf.if", "scf.for") and any(
                    operand in varying for operand in parent.operands
                ):
                    raise op_error(
                        op,
                        f"under an '{parent.name}' whose condition or "
                        f"bounds depend on the item or lane: lanes that take "
                        f"another path never reach it; move it out of the branch "
                        f"or loop",
                    )
                parent = parent.parent_op()


# A buffer as the kernels of a program must agree on it:
# (name, binding, access, shape, dtype)
SharedBuffer = tuple[str, int, str, tuple[int, ...], str]


def _declared(buffer: SharedBuffer) -> str:
    _, binding, access, shape, dtype = buffer
    return f"binding {binding} {access} {list(shape)} {dtype}"


def check_shared_buffers(
    earlier: Sequence[tuple[str, Sequence[SharedBuffer]]], kernel: str,
    buffers: Sequence[SharedBuffer],
) -> None:
    """The kernels of one module run as a program over one set of buffers:
    a name means the same buffer in `kernel` as in each `earlier` kernel
    (name, buffers), and a binding belongs to one name.  Used by the vyre
    dialect's kernel verifier and by the loader of lowered kernels."""
    for other, theirs in earlier:
        by_name = {b[0]: b for b in theirs}
        by_binding = {b[1]: b for b in theirs}
        for buffer in buffers:
            name, binding = buffer[0], buffer[1]
            first = by_name.get(name)
            if first is not None and first != buffer:
                raise VerifyException(
                    f"buffer {name!r} is {_declared(first)} in kernel @{other} but "
                    f"{_declared(buffer)} in kernel @{kernel}; the kernels of a "
                    f"module share their buffers, so declare it the same way in each"
                )
            owner = by_binding.get(binding)
            if owner is not None and owner[0] != name:
                raise VerifyException(
                    f"binding {binding} is buffer {owner[0]!r} in kernel @{other} but "
                    f"buffer {name!r} in kernel @{kernel}; the kernels of a module "
                    f"share their buffers, so give each name its own binding"
                )
