"""vyre-xdsl: a compiler for fused tiled online-softmax attention kernels."""

from vyre_xdsl.errors import VyreError
from vyre_xdsl.decoders import flash_attention_2, mla_decode
from vyre_xdsl.skeleton import Buffer, Fragment, tiled_online_softmax

__all__ = [
    "VyreError",
    "Buffer",
    "Fragment",
    "flash_attention_2",
    "mla_decode",
    "tiled_online_softmax",
]
