"""What an MLA decode kernel records it is, for the rewrites that need it.

`vx.mla_decode` puts `vyre.mla = #vyre.mla<...>` on its `vyre.kernel`: the
shape it was built for (the builder's arguments).  `vyre-absorb-mla` reads
that record, checks the kernel's buffers and skeleton against it, and
rewrites the kernel into an absorbed form of the same shape: intent in the
IR, not a guess from the kernel's body.  The absorbed forms carry no
record (they are not absorbed again).

The absorbed program's two projections record theirs as `vyre.head_product
= #vyre.head_product<...>`: the per-head matrix product the kernel
computes, which vyre-projection-tensor-cores rewrites onto the matrix units.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects.builtin import IntAttr, IntegerAttr, NoneAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.utils.exceptions import VerifyException

from vyre_xdsl.dialects.launch import U32_LIMIT, _Keyed, _parse_int

MLA_ATTR = "vyre.mla"  # on the vyre.kernel of a seed MLA decode
HEAD_PRODUCT_ATTR = "vyre.head_product"  # on a kernel that is a per-head product

DIMS = ("seq_len", "num_heads", "head_dim", "kv_lora_rank", "qk_rope_head_dim")
# the serving arguments, printed where the builder was given them
SERVING = ("batch", "kv_lens", "page_size", "num_pages")


@irdl_attr_definition
class MlaAttr(_Keyed, ParametrizedAttribute):
    """`#vyre.mla<seq_len = 4096, num_heads = 16, head_dim = 128, kv_lora_rank
    = 512, qk_rope_head_dim = 64>`, with `batch = B`, `kv_lens = true` and
    `page_size = P, num_pages = N` where the builder got them: the arguments
    of `vx.mla_decode` the kernel was built with (its tile size is the
    skeleton's, its dtype the buffers')."""

    name = "vyre.mla"
    OPTIONAL = frozenset(SERVING)

    seq_len: IntAttr
    num_heads: IntAttr
    head_dim: IntAttr
    kv_lora_rank: IntAttr
    qk_rope_head_dim: IntAttr
    batch: IntAttr | NoneAttr  # not given where absent (one sequence, no batch axis)
    kv_lens: IntegerAttr | NoneAttr  # a bool; false where absent
    page_size: IntAttr | NoneAttr
    num_pages: IntAttr | NoneAttr

    def __init__(
        self, *, batch: int | None = None, kv_lens: bool = False, page_size: int | None = None,
        num_pages: int | None = None, **dims: int,
    ):
        def optional(value, absent, make):
            return NoneAttr() if value == absent else make(value)

        super().__init__(
            *(IntAttr(dims[f]) for f in DIMS),
            optional(batch, None, IntAttr),
            optional(kv_lens, False, IntegerAttr.from_bool),
            optional(page_size, None, IntAttr),
            optional(num_pages, None, IntAttr),
        )

    @classmethod
    def value_parsers(cls, parser: AttrParser) -> dict[str, Callable[[], Attribute]]:
        fields = {f: (lambda: _parse_int(parser)) for f in (*DIMS, *SERVING)}
        fields["kv_lens"] = lambda: IntegerAttr.from_bool(parser.parse_boolean())
        return fields

    def arguments(self) -> dict[str, object]:
        """The builder's keyword arguments (seq_len ... num_pages)."""
        values = {f: getattr(self, f) for f in (*DIMS, *SERVING)}
        args: dict[str, object] = {
            f: None if isinstance(v, NoneAttr) else v.data for f, v in values.items()
            if f != "kv_lens"
        }
        args["kv_lens"] = not isinstance(self.kv_lens, NoneAttr) and bool(
            self.kv_lens.value.data)
        return args

    def verify(self) -> None:
        args = self.arguments()
        for field in (*DIMS, "batch", "page_size", "num_pages"):
            value = args[field]
            if value is not None and not 1 <= value < U32_LIMIT:
                raise VerifyException(
                    f"#vyre.mla: '{field}' must be in [1, 2^32), got {value}"
                )
        if args["qk_rope_head_dim"] > args["head_dim"]:
            raise VerifyException(
                f"#vyre.mla: qk_rope_head_dim {args['qk_rope_head_dim']} is larger "
                f"than head_dim {args['head_dim']}"
            )
        if (args["page_size"] is None) != (args["num_pages"] is None):
            raise VerifyException("#vyre.mla: give both page_size and num_pages, or neither")
        if args["page_size"] is not None and not args["kv_lens"]:
            raise VerifyException("#vyre.mla: a paged cache needs kv_lens = true")


PRODUCT_BUFFERS = ("source", "weights", "dest")
PRODUCT_DIMS = ("sequences", "heads", "depth", "width")


@irdl_attr_definition
class HeadProductAttr(_Keyed, ParametrizedAttribute):
    """`#vyre.head_product<source = "q", weights = "w_uk", dest = "q_lat",
    sequences = 32, heads = 16, depth = 128, width = 512, transposed =
    true>`: the kernel computes, for every sequence s, head h and column
    n < width,

        dest[s, h, n] = sum over k < depth, in order, of
                        source[s, h, k] * weights[k, h, n]

    (`transposed`: weights[n, h, k]), each buffer flat in that index order.
    The record is the kernel's word, as `#vyre.mla` is: a rewrite that
    changes what the kernel computes drops it."""

    name = "vyre.head_product"

    source: StringAttr
    weights: StringAttr
    dest: StringAttr
    sequences: IntAttr
    heads: IntAttr
    depth: IntAttr
    width: IntAttr
    transposed: IntegerAttr  # a bool

    def __init__(self, *, transposed: bool, **fields: str | int):
        super().__init__(
            *(StringAttr(str(fields[f])) for f in PRODUCT_BUFFERS),
            *(IntAttr(int(fields[f])) for f in PRODUCT_DIMS),
            IntegerAttr.from_bool(transposed),
        )

    @classmethod
    def value_parsers(cls, parser: AttrParser) -> dict[str, Callable[[], Attribute]]:
        fields: dict[str, Callable[[], Attribute]] = {
            f: (lambda: StringAttr(parser.parse_str_literal())) for f in PRODUCT_BUFFERS}
        fields.update({f: (lambda: _parse_int(parser)) for f in PRODUCT_DIMS})
        fields["transposed"] = lambda: IntegerAttr.from_bool(parser.parse_boolean())
        return fields

    def names(self) -> tuple[str, str, str]:
        """The source, weights and dest buffers' names."""
        return self.source.data, self.weights.data, self.dest.data

    def dims(self) -> tuple[int, int, int, int]:
        """(sequences, heads, depth, width)."""
        return self.sequences.data, self.heads.data, self.depth.data, self.width.data

    @property
    def is_transposed(self) -> bool:
        return bool(self.transposed.value.data)

    def weight_strides(self) -> tuple[int, int]:
        """(the stride of k, the stride of n) in the weights, whose head h
        starts at h * (depth or width)."""
        _, heads, depth, width = self.dims()
        return (1, heads * depth) if self.is_transposed else (heads * width, 1)

    def verify(self) -> None:
        for field, value in zip(PRODUCT_DIMS, self.dims(), strict=True):
            if not 1 <= value < U32_LIMIT:
                raise VerifyException(
                    f"#vyre.head_product: '{field}' must be in [1, 2^32), got {value}")
        sequences, heads, depth, width = self.dims()
        if max(sequences * heads * max(depth, width), heads * depth * width) >= U32_LIMIT:
            raise VerifyException("#vyre.head_product: its buffers hold more than u32 elements")
        if len(set(self.names())) != 3:
            raise VerifyException(
                f"#vyre.head_product: source, weights and dest must be three buffers, got "
                f"{', '.join(repr(n) for n in self.names())}")
