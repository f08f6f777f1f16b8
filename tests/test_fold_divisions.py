"""vyre-fold-divisions: (x + c) / d and (x + c) % d folded where x is a known
multiple of m and 0 <= c < gcd(m, d), and only there; and what it is for:
a paged cache's tile looks its page up once, so its key and value loads
become vector loads."""

from __future__ import annotations

import re
from math import gcd

import pytest
from xdsl.dialects import arith, memref

import vyre_xdsl as vx
from vyre_xdsl.compiler import apply_pipeline, parse_module
from vyre_xdsl.tile_products import _evaluate

STARTS = range(0, 40)  # the loop's iterations evaluated


def _stored(m: int, d: int, c: int):
    """The module storing (x + c) / d and (x + c) % d for x in a loop of
    step m, after the pass; and whether it folded them."""
    module = parse_module(f"""
func.func @f(%n: index, %out: memref<2xindex>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = arith.constant {m} : index
  %c = arith.constant {c} : index
  %d = arith.constant {d} : index
  scf.for %x = %c0 to %n step %m {{
    %t = arith.addi %x, %c : index
    %q = arith.divui %t, %d : index
    %r = arith.remui %t, %d : index
    memref.store %q, %out[%c0] : memref<2xindex>
    memref.store %r, %out[%c1] : memref<2xindex>
  }}
  func.return
}}""")
    apply_pipeline(module, "vyre-fold-divisions")
    stores = [op for op in module.walk() if isinstance(op, memref.StoreOp)]
    folded = not any(isinstance(op, arith.RemUIOp) for op in module.walk())
    return stores, folded


@pytest.mark.parametrize("m", [1, 2, 4, 16, 48])
@pytest.mark.parametrize("d", [1, 3, 4, 16, 64])
@pytest.mark.parametrize("c", [0, 1, 3, 15, 16, 17])
def test_folds_exactly_where_the_sum_stays_in_the_block(m, d, c):
    stores, folded = _stored(m, d, c)
    assert folded == (c < gcd(m, d))
    x = stores[0].parent_block().parent_op().body.block.args[0]
    for start in STARTS:
        value = start * m
        quotient, remainder = (_evaluate(s.value, {x: value}) for s in stores)
        assert (quotient, remainder) == ((value + c) // d, (value + c) % d)


def test_a_paged_tile_reads_its_keys_and_values_as_vectors():
    # bf16 GQA decode over pages of 16 keys, the H200's plan (a key head's
    # rows on a lane, tiles of 16 keys): every key of a tile is in the
    # tile's page, so the jammed copies share one lookup and their loads of
    # a lane's 8 dims are one vector load each
    module = vx.flash_attention_2(seq_len=1, kv_len=4096, batch=8, num_heads=32,
                                  num_kv_heads=8, head_dim=128, dtype="bf16",
                                  page_size=16, num_pages=8 * 4096 // 16)
    text = str(vx.lower_to_gpu(module, device="h200"))
    assert re.search(r"vector\.load %k\[", text) and re.search(r"vector\.load %v\[", text)
    assert not re.search(r"memref\.load %[kv]\[", text)
