// RUN: vyre-opt %examples/gqa_causal_alibi.mlir > %t.1.mlir
// RUN: vyre-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: filecheck %s < %t.1.mlir

// The mask region, tile_classes and vyre.tile_weight print and parse back.
// CHECK:      vyre.kernel @flex_attention items 256 workgroup_size 64 {
// CHECK:        %q = vyre.buffer "q" binding 0 read [2, 128, 2] : memref<512xf32>
// CHECK:        %k = vyre.buffer "k" binding 1 read [1, 128, 2] : memref<256xf32>
// CHECK:        vyre.tiled_online_softmax
// CHECK-NEXT:     item_count 256 seq_len 128 head_dim 2 tile_size 32 tile_count 4 tile_classes [2, 2, 0, 0, 1, 1, 2, 2, 2, 2, 0, 0, 1, 1, 2, 2]
// CHECK:        scores(
// CHECK:          math.exp2
// CHECK:          vyre.bounded_score
// CHECK:        update(
// CHECK:          vyre.tile_weight
// CHECK:        mask(%{{.*}}, %{{.*}}, %kv_idx) {
// CHECK:          %[[KEEP:.*]] = arith.cmpi sle, %{{.*}}, %{{.*}} : i32
// CHECK-NEXT:     vyre.yield %[[KEEP]] : i1
