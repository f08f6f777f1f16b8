// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// A prologue takes (item, lane, q_scratch, o_acc).
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    "vyre.tiled_online_softmax"(%q, %out, %qs, %st, %oa) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0>, item_count = 4 : i64, seq_len = 4 : i64, head_dim = 2 : i64, tile_size = 2 : i64, tile_count = 2 : i64}> ({
    ^bb0(%item: index, %lane: index, %ts: index, %tl: index, %a: memref<128xf32>, %b: memref<128xf32>):
      "vyre.yield"() : () -> ()
    }, {
    ^bb0(%item2: index, %lane2: index, %ts2: index, %tl2: index, %m: f32, %r: f32, %c: memref<128xf32>, %d: memref<128xf32>):
      "vyre.yield"() : () -> ()
    }, {
    ^bb0(%item3: index, %lane3: index, %e: memref<128xf32>):
      "vyre.yield"() : () -> ()
    }, {
    ^bb0(%item4: index, %lane4: index, %g: memref<128xf32>):
      "vyre.yield"() : () -> ()
    }) : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>) -> ()
  }
}
// CHECK: {{.*}}hook_errors.mlir:11:5: error: 'vyre.tiled_online_softmax' op region 'prologue' must take (%item: index, %lane: index, %q_scratch: memref<128xf32>, %o_acc: memref<128xf32>), got (index, index, memref<128xf32>)

// -----

// An epilogue ends with a plain vyre.yield.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    } epilogue(%item3, %lane3, %o) {
      %zero = arith.constant 0.0 : f32
      vyre.yield %zero : f32
    }
  }
}
// CHECK: {{.*}}hook_errors.mlir:38:5: error: 'vyre.tiled_online_softmax' op the scores, update, prologue and epilogue regions end with a plain vyre.yield (no values); only the mask region yields an i1
