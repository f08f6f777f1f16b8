// RUN: vyre-opt %s -p 'vyre-resize-workgroup{size=32}' | filecheck %s
// RUN: vyre-opt %s -p vyre-resize-workgroup | filecheck %s --check-prefix=AUTO
// RUN: vyre-opt %s -p 'vyre-resize-workgroup{size=128}' | filecheck %s --check-prefix=BIG
// RUN: not vyre-opt %s -p 'vyre-resize-workgroup{size=48}' 2>&1 | filecheck %s --check-prefix=BAD

// A causal kernel of 128 rows: 2 query blocks of 64 x 2 key tiles of 64
// (classes [partial, empty, full, partial]), 2 workgroups.
builtin.module {
  vyre.kernel @causal items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 1] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [128, 1] : memref<128xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    %extra = vyre.scratch "extra" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 128 seq_len 128 head_dim 1 tile_size 64 tile_count 2 tile_classes [2, 0, 1, 2]
        : (memref<128xf32>, memref<128xf32>, memref<64xf32>, memref<4096xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      %c0 = arith.constant 0 : index
      %x = memref.load %extra[%c0] : memref<128xf32>
      vyre.yield
    } mask(%item3, %lane3, %kv_idx) {
      %keep = arith.cmpi ule, %kv_idx, %item3 : index
      vyre.yield %keep : i1
    }
  }
}

// Workgroups of 32: the per-lane scratch halves (the decoder's own too, and
// the fragments' arguments with it); each block of 64 rows becomes two
// blocks of 32 with its classes.
// CHECK:      vyre.kernel @causal items 128 workgroup_size 32 {
// CHECK:        %q_scratch = vyre.scratch "q_scratch" : memref<32xf32>
// CHECK-NEXT:   %score_tile = vyre.scratch "score_tile" : memref<2048xf32>
// CHECK-NEXT:   %o_acc = vyre.scratch "o_acc" : memref<32xf32>
// CHECK-NEXT:   %extra = vyre.scratch "extra" : memref<64xf32>
// CHECK:        tile_classes [2, 0, 2, 0, 1, 2, 1, 2]
// CHECK-NEXT:   : (memref<128xf32>, memref<128xf32>, memref<32xf32>, memref<2048xf32>, memref<32xf32>)
// CHECK-NEXT: scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
// CHECK:      update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
// CHECK:        %x = memref.load %extra[%c0] : memref<64xf32>

// Without a size the pass chooses: 128 lanes only for grids of more than
// 264 workgroups; these 2 keep their 64.
// AUTO:       vyre.kernel @causal items 128 workgroup_size 64 {
// AUTO-NEXT:    %q = vyre.buffer "q"

// Workgroups of 128: one block covers both; a tile is empty or full for it
// only where it is for both halves, else partial.
// BIG:        vyre.kernel @causal items 128 workgroup_size 128 {
// BIG:          %q_scratch = vyre.scratch "q_scratch" : memref<128xf32>
// BIG:          tile_classes [2, 2]

// BAD: resize_workgroup.mlir:9:3: error: vyre-resize-workgroup: size 48 must be a positive divisor or multiple of the workgroup size 64 of @causal
