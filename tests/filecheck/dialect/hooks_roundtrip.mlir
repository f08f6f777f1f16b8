// The prologue and epilogue hooks print, parse and print identically, in
// the custom and the generic form; a hook that only yields is not printed.
// RUN: vyre-opt %examples/mla_decode_absorbed.mlir > %t.1.mlir
// RUN: vyre-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: vyre-opt %examples/mla_decode_absorbed.mlir --print-op-generic | vyre-opt | diff - %t.1.mlir
// RUN: filecheck %s --input-file %t.1.mlir
// RUN: vyre-opt %examples/flash_attention_2.mlir | filecheck %s --check-prefix=PLAIN

// CHECK:      vyre.kernel @mla_decode items 4 workgroup_size 64 {
// CHECK:        %q_lat = vyre.scratch "q_lat" : memref<512xf32>
// CHECK-NEXT:   %o_lat = vyre.scratch "o_lat" : memref<512xf32>
// CHECK:        scores(%item, %lane, %tile_start, %tile_len, %{{.*}}, %{{.*}}) {
// CHECK:        update(
// CHECK:        prologue(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {
// CHECK:          memref.store %{{.*}}, %q_lat
// CHECK:        epilogue(%{{.*}}, %{{.*}}, %{{.*}}) {
// CHECK:          memref.load %w_uv

// PLAIN-NOT:  prologue
// PLAIN-NOT:  epilogue
