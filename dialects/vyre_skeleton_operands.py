"""What the skeleton's verifier checks of its buffer and scratch operands:
their ops, access and sizes (q, out, lse, kv_lens, the split partials and
the three scratch arrays)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.utils.exceptions import VerifyException

from vyre_xdsl.dialects.vyre_checks import (
    _check_buffer_vector,
    _check_f32_vector,
    _check_i32_vector,
    _element_count,
    _int,
    check_u32_product,
)
from vyre_xdsl.dialects.vyre_kernel import (
    BufferOp,
    ScratchOp,
    sized_buffer_operand,
)

if TYPE_CHECKING:
    from vyre_xdsl.dialects.vyre_skeleton import TiledOnlineSoftmaxOp


def verify_partials(op: TiledOnlineSoftmaxOp, shape: dict[str, int]) -> None:
    if len(op.partials) != 2 or op.splits == 1:
        raise VerifyException(
            "'partials' takes two buffers, (m, l), and needs kv_splits >= 2: "
            "they hold the partial results of an item's splits"
        )
    wanted = shape["item_count"] * op.splits
    for role, value in zip(("m", "l"), op.partials, strict=True):
        sized_buffer_operand(value, role, ("temp",), wanted,
                             f"item_count * kv_splits = {wanted}", prefix="partials ",
                             note=" (a later kernel merges it)")

def verify_sizes(op: TiledOnlineSoftmaxOp, shape: dict[str, int], lanes: int) -> None:
    v_name = "head_dim" if op.v_head_dim is None else "v_head_dim"
    widths = {"q": ("head_dim", shape["head_dim"]), "out": (v_name, op.v_dim)}
    out_rows = shape["item_count"] * (op.splits if op.merges_in_kernel else 1)
    for role, value, access in (("q", op.q, "read"), ("out", op.out, "write")):
        width_name, width = widths[role]
        row_elements = check_u32_product(
            "q/out size" if op.v_head_dim is None else f"{role} size",
            [("item_count", shape["item_count"]), (width_name, width)],
            f"reduce item_count or {width_name}",
        )
        owner = value.owner
        if not isinstance(owner, BufferOp) or owner.access.data not in (access, "temp"):
            raise VerifyException(
                f"operand '{role}' must be a vyre.buffer with access "
                f"\"{access}\" (or \"temp\", between the kernels of a module)"
            )
        memref_type = _check_buffer_vector(value, f"operand '{role}'")
        count, element = _element_count(memref_type), memref_type.element_type
        if role == "out" and out_rows != shape["item_count"]:
            if count != out_rows * width:
                raise VerifyException(
                    f"buffer '{owner.sym_name.data}' (out) holds {count} {element} "
                    f"but with partials it takes one row per split: item_count * "
                    f"kv_splits * {width_name} = {out_rows * width}"
                )
        elif count != row_elements:
            raise VerifyException(
                f"buffer '{owner.sym_name.data}' ({role}) holds {count} {element} "
                f"but item_count * {width_name} = {row_elements}; size it "
                f"memref<{row_elements}x{element}>"
            )
    if op.lse is not None:
        verify_lse(op, shape)
    verify_kv_lens(op, shape)
    parts = op.parts
    q_dims = ("head_dim", shape["head_dim"]) if parts == 1 else (
        "head_dim / dim_parts", shape["head_dim"] // parts)
    o_dims = (v_name, op.v_dim) if parts == 1 else (
        f"{v_name} / dim_parts", op.v_dim // parts)
    score_dims = ("tile_size", shape["tile_size"])
    if op.score_stride is not None:
        score_dims = ("score_stride", op.scores_per_lane)
        if op.scores_per_lane < shape["tile_size"]:
            raise VerifyException(
                f"'score_stride' is {op.scores_per_lane} but a lane's slice of "
                f"score_tile holds a tile's {shape['tile_size']} scores; give it at least "
                f"tile_size"
            )
    for role, value, stride in (
        ("q_scratch", op.q_scratch, q_dims),
        ("score_tile", op.score_tile, score_dims),
        ("o_acc", op.o_acc, o_dims),
    ):
        if not isinstance(value.owner, ScratchOp):
            raise VerifyException(f"operand '{role}' must be a vyre.scratch")
        wanted = check_u32_product(
            f"scratch '{role}' size",
            [("workgroup_size", lanes), stride],
            f"reduce {stride[0].split()[0]}",
        )
        count = _element_count(_check_f32_vector(value, f"operand '{role}'"))
        if count != wanted:
            raise VerifyException(
                f"scratch '{role}' holds {count} f32 but workgroup_size * "
                f"{stride[0]} = {wanted}; size it memref<{wanted}xf32>"
            )

def verify_lse(op: TiledOnlineSoftmaxOp, shape: dict[str, int]) -> None:
    assert op.lse is not None
    sized_buffer_operand(op.lse, "lse", ("write",), shape["item_count"],
                         f"there are {shape['item_count']} items, one log-sum-exp each")
    if op.merges_in_kernel:
        raise VerifyException(
            "'lse' cannot be combined with partials(%m, %l): the invocations "
            "leave partial results, and the kernel that merges them writes the "
            "log-sum-exp (vyre.merge_splits lse(%lse) keys N, as "
            "vyre-split-kv{merge=kernel} makes it)"
        )

def verify_kv_lens(op: TiledOnlineSoftmaxOp, shape: dict[str, int]) -> None:
    if op.kv_lens is None:
        if op.items_per_seq is not None:
            raise VerifyException(
                "'items_per_seq' needs a kv_lens(%lens) operand: it says which "
                "entry of kv_lens gives an item's key count"
            )
        return
    if op.items_per_seq is None:
        raise VerifyException(
            "kv_lens(%lens) needs 'items_per_seq N': item i's key count is "
            "kv_lens[i / N]"
        )
    per_seq = _int(op.items_per_seq)
    if per_seq < 1 or shape["item_count"] % per_seq:
        raise VerifyException(
            f"'items_per_seq' is {per_seq}; it must be > 0 and divide item_count "
            f"({shape['item_count']}): every sequence has as many items"
        )
    sequences = shape["item_count"] // per_seq
    sized_buffer_operand(
        op.kv_lens, "kv_lens", ("read",), sequences,
        f"there are item_count / items_per_seq = {sequences} sequences, one key count each",
        vector=_check_i32_vector, element="i32",
    )
    if op.tile_classes is not None:
        raise VerifyException(
            "'tile_classes' cannot be combined with kv_lens: the key count is "
            "only known at run time, so every tile of a mask is partial (leave "
            "tile_classes out)"
        )
