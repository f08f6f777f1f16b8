"""The vector ops of lowered kernels: `vector.load` and `vector.extract`
(vyre-vectorize-loads), `vector.from_elements` and `vector.store` (a
lane's 16 bytes copied into workgroup memory by the matrix expansions).
A vector value is a tuple of its elements, each a uniform scalar or a lane
vector like any other value."""

from __future__ import annotations

import numpy as np
from xdsl.dialects import vector
from xdsl.interpreter import impl, register_impls

from vyre_xdsl.dialects.vector_from_elements import FromElementsOp
from vyre_xdsl.errors import VyreError
from vyre_xdsl.interp.base import LaneFunctions
from vyre_xdsl.interp.memref import Buffer, gather, scatter


def vector_width(op: vector.LoadOp | vector.StoreOp) -> int:
    ty = op.result.type if isinstance(op, vector.LoadOp) else op.vector.type
    shape = ty.get_shape()
    if len(shape) != 1:
        raise VyreError(f"{op.name}: only 1-d vectors are supported, got {ty}")
    return shape[0]


@register_impls
class VectorFunctions(LaneFunctions):
    @impl(vector.LoadOp)
    def run_load(self, interpreter, op: vector.LoadOp, args):
        buf: Buffer = args[0]
        if len(args) != 2:
            raise VyreError(f"{op.name}: only 1-d memrefs are supported")
        index = args[1]
        elements = tuple(
            gather(self.state, op, buf, index + np.uint32(k))
            for k in range(vector_width(op))
        )
        return (elements,)

    @impl(vector.StoreOp)
    def run_store(self, interpreter, op: vector.StoreOp, args):
        elements, buf = args[0], args[1]
        if len(args) != 3:
            raise VyreError(f"{op.name}: only 1-d memrefs are supported")
        for k in range(vector_width(op)):
            scatter(self.state, op, buf, args[2] + np.uint32(k), elements[k])
        return ()

    @impl(FromElementsOp)
    def run_from_elements(self, interpreter, op: FromElementsOp, args):
        return (tuple(args),)

    @impl(vector.ExtractOp)
    def run_extract(self, interpreter, op: vector.ExtractOp, args):
        position = self.cache.get(op)
        if position is None:
            if op.dynamic_position or len(op.static_position.get_values()) != 1:
                raise VyreError(
                    f"{op.name}: only one static position is supported (as "
                    f"vyre-vectorize-loads makes them)"
                )
            position = self.cache[op] = op.static_position.get_values()[0]
        return (args[0][position],)
