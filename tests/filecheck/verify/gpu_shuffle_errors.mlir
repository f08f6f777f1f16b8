// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not vyre-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// gpu.shuffle's verifier and parser: one chunk per error.
// The mode is an enum attribute, as in MLIR, not a string.
func.func @string_mode(%x: f32, %o: i32, %w: i32) {
  %r, %v = "gpu.shuffle"(%x, %o, %w) <{mode = "xor"}> : (f32, i32, i32) -> (f32, i1)
  func.return
}
// CHECK: {{.*}}gpu_shuffle_errors.mlir:7:3: error: 'gpu.shuffle' op "xor" should be of base attribute gpu.shuffle_mode

// -----

func.func @f16_value(%x: f16, %o: i32, %w: i32) {
  %r, %v = gpu.shuffle xor %x, %o, %w : f16
  func.return
}
// CHECK: {{.*}}gpu_shuffle_errors.mlir:15:3: error: 'gpu.shuffle' op shuffles an f32 or i32 value, not f16

// -----

func.func @result_type(%x: f32, %o: i32, %w: i32) {
  %r, %v = "gpu.shuffle"(%x, %o, %w) <{mode = #gpu<shuffle_mode xor>}> : (f32, i32, i32) -> (i32, i1)
  func.return
}
// CHECK: {{.*}}gpu_shuffle_errors.mlir:23:3: error: 'gpu.shuffle' op result 'result' at position 0 does not verify

// -----

func.func @index_offset(%x: f32, %o: index, %w: i32) {
  %r, %v = "gpu.shuffle"(%x, %o, %w) <{mode = #gpu<shuffle_mode xor>}> : (f32, index, i32) -> (f32, i1)
  func.return
}
// CHECK: {{.*}}gpu_shuffle_errors.mlir:31:3: error: 'gpu.shuffle' op operand 'offset' at position 1 does not verify

// -----

func.func @syntax(%x: f32, %o: i32, %w: i32) {
  %r, %v = gpu.shuffle sideways %x, %o, %w : f32
  func.return
}
// CHECK: {{.*}}gpu_shuffle_errors.mlir:39:24: error: Expected `xor`, `up`, `down`, or `idx`.

// -----

func.func @bad_mode(%x: f32, %o: i32, %w: i32) {
  %r, %v = "gpu.shuffle"(%x, %o, %w) <{mode = #gpu<shuffle_mode sideways>}> : (f32, i32, i32) -> (f32, i1)
  func.return
}
// CHECK: {{.*}}gpu_shuffle_errors.mlir:47:65: error: Expected `xor`, `up`, `down`, or `idx`.

// EXIT: error:
