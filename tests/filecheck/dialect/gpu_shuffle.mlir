// RUN: vyre-opt %s | filecheck %s
// RUN: vyre-opt %s --print-op-generic | vyre-opt | filecheck %s
// RUN: vyre-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: vyre-opt %s --print-op-generic | vyre-opt --print-op-generic | filecheck %s --check-prefix=GENERIC

// gpu.shuffle keeps MLIR's custom syntax in every mode, for f32 and i32,
// beside xDSL's gpu.subgroup_size (generic form only); its generic form
// carries the mode as MLIR's enum attribute, #gpu<shuffle_mode ...>, and
// both forms keep discardable attributes.
func.func @shuffles(%x: f32, %k: i32, %off: i32) -> (f32, i32, i1) {
  %sg = "gpu.subgroup_size"() : () -> index
  %w = arith.index_cast %sg : index to i32
  %a, %a_ok = gpu.shuffle xor %x, %off, %w : f32
  %b, %b_ok = gpu.shuffle up %a, %off, %w : f32
  %c, %c_ok = gpu.shuffle down %b, %off, %w : f32
  %d, %d_ok = gpu.shuffle idx %k, %off, %w {vyre.note = "kept"} : i32
  func.return %c, %d, %a_ok : f32, i32, i1
}
// CHECK:      %sg = "gpu.subgroup_size"() : () -> index
// CHECK-NEXT: %w = arith.index_cast %sg : index to i32
// CHECK-NEXT: %a, %a_ok = gpu.shuffle xor %x, %off, %w : f32
// CHECK-NEXT: %b, %b_ok = gpu.shuffle up %a, %off, %w : f32
// CHECK-NEXT: %c, %c_ok = gpu.shuffle down %b, %off, %w : f32
// CHECK-NEXT: %d, %d_ok = gpu.shuffle idx %k, %off, %w {vyre.note = "kept"} : i32
// CHECK-NEXT: func.return %c, %d, %a_ok : f32, i32, i1

// GENERIC:      %a, %a_ok = "gpu.shuffle"(%x, %off, %w) <{mode = #gpu<shuffle_mode xor>}> : (f32, i32, i32) -> (f32, i1)
// GENERIC-NEXT: %b, %b_ok = "gpu.shuffle"(%a, %off, %w) <{mode = #gpu<shuffle_mode up>}> : (f32, i32, i32) -> (f32, i1)
// GENERIC-NEXT: %c, %c_ok = "gpu.shuffle"(%b, %off, %w) <{mode = #gpu<shuffle_mode down>}> : (f32, i32, i32) -> (f32, i1)
// GENERIC-NEXT: %d, %d_ok = "gpu.shuffle"(%k, %off, %w) <{mode = #gpu<shuffle_mode idx>}> {vyre.note = "kept"} : (i32, i32, i32) -> (i32, i1)
