// Print -> parse -> print is identical for both shipped decoders.
// RUN: vyre-opt %examples/flash_attention_2.mlir > %t.fa2.1.mlir
// RUN: vyre-opt %t.fa2.1.mlir > %t.fa2.2.mlir
// RUN: diff %t.fa2.1.mlir %t.fa2.2.mlir
// RUN: vyre-opt %examples/mla_decode.mlir > %t.mla.1.mlir
// RUN: vyre-opt %t.mla.1.mlir > %t.mla.2.mlir
// RUN: diff %t.mla.1.mlir %t.mla.2.mlir
// The generic form parses back to the same custom form too.
// RUN: vyre-opt %examples/mla_decode.mlir --print-op-generic | vyre-opt | diff - %t.mla.1.mlir
// RUN: filecheck %s --input-file %t.fa2.1.mlir

// CHECK:      vyre.kernel @flash_attention_2 items 100 workgroup_size 64 {
// CHECK-NEXT:   %q = vyre.buffer "q" binding 0 read [100, 16] : memref<1600xf32>
// CHECK-NEXT:   %k = vyre.buffer "k" binding 1 read [100, 16] : memref<1600xf32>
// CHECK-NEXT:   %v = vyre.buffer "v" binding 2 read [100, 16] : memref<1600xf32>
// CHECK-NEXT:   %out = vyre.buffer "out" binding 3 write [100, 16] : memref<1600xf32>
// CHECK-NEXT:   %q_scratch = vyre.scratch "q_scratch" : memref<1024xf32>
// CHECK-NEXT:   %score_tile = vyre.scratch "score_tile" : memref<2048xf32>
// CHECK-NEXT:   %o_acc = vyre.scratch "o_acc" : memref<1024xf32>
// CHECK-NEXT:   vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
// CHECK-NEXT:       item_count 100 seq_len 100 head_dim 16 tile_size 32 tile_count 4
// CHECK-NEXT:       : (memref<1600xf32>, memref<1600xf32>, memref<1024xf32>, memref<2048xf32>, memref<1024xf32>)
// CHECK-NEXT:   scores(%item, %lane, %tile_start, %tile_len, %{{.*}}, %{{.*}}) {
// CHECK:          vyre.bounded_score
// CHECK:          vyre.yield
// CHECK-NEXT:   }
// CHECK-NEXT:   update(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %m_new, %rescale, %{{.*}}, %{{.*}}) {
// CHECK:          vyre.tile_weight
// CHECK:          vyre.yield
