// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not vyre-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// The verifiers of !gpu.mma_matrix and the gpu.subgroup_mma_* ops
// (dialects/gpu_mma.py): one chunk per error.
func.func @f64_matrix(%m: memref<16x16xf64>, %i: index) {
  %a = gpu.subgroup_mma_load_matrix %m[%i, %i] {leadDimension = 16 : index} : memref<16x16xf64> -> !gpu.mma_matrix<16x16xf64, "AOp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:7:3: error: !gpu.mma_matrix elements must be f16, bf16 or f32 (the types vyre executes), not f64

// -----

func.func @bad_operand(%m: memref<16x16xf16>, %i: index) {
  %a = gpu.subgroup_mma_load_matrix %m[%i, %i] {leadDimension = 16 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "DOp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:15:3: error: !gpu.mma_matrix operand must be "AOp", "BOp" or "COp", not "DOp"

// -----

func.func @load_indices(%m: memref<16x16xf16>, %i: index) {
  %a = gpu.subgroup_mma_load_matrix %m[%i] {leadDimension = 16 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:23:3: error: 'gpu.subgroup_mma_load_matrix' op takes one index per dimension of memref<16x16xf16>: 2, not 1

// -----

func.func @load_element_type(%m: memref<16x16xf32>, %i: index) {
  %a = gpu.subgroup_mma_load_matrix %m[%i, %i] {leadDimension = 16 : index} : memref<16x16xf32> -> !gpu.mma_matrix<16x16xf16, "AOp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:31:3: error: 'gpu.subgroup_mma_load_matrix' op loads an f16 matrix from a memref of f32: the element types must be the same (convert the buffer, or use an f32 matrix)

// -----

func.func @lead_dimension(%m: memref<16x16xf16>, %i: index) {
  %a = gpu.subgroup_mma_load_matrix %m[%i, %i] {leadDimension = 8 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:39:3: error: 'gpu.subgroup_mma_load_matrix' op leadDimension 8 is smaller than the 16 elements of a stored tile row: the rows would overlap; pass the memref's row length (at least 16)

// -----

func.func @store_a(%m: memref<16x16xf16>, %i: index) {
  %a = gpu.subgroup_mma_load_matrix %m[%i, %i] {leadDimension = 16 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
  gpu.subgroup_mma_store_matrix %a, %m[%i, %i] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf16, "AOp">, memref<16x16xf16>
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:48:3: error: 'gpu.subgroup_mma_store_matrix' op stores only "COp" matrices (results of gpu.subgroup_mma_compute); this one is "AOp"

// -----

func.func @store_element_type(%m: memref<16x16xf16>, %i: index, %x: f32) {
  %c = gpu.subgroup_mma_constant_matrix %x : !gpu.mma_matrix<16x16xf32, "COp">
  gpu.subgroup_mma_store_matrix %c, %m[%i, %i] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf32, "COp">, memref<16x16xf16>
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:57:3: error: 'gpu.subgroup_mma_store_matrix' op stores an f32 matrix to a memref of f16: the element types must be the same (convert the buffer, or use an f16 matrix)

// -----

func.func @order(%a: !gpu.mma_matrix<16x16xf16, "BOp">, %b: !gpu.mma_matrix<16x16xf16, "AOp">, %c: !gpu.mma_matrix<16x16xf32, "COp">) {
  %d = gpu.subgroup_mma_compute %a, %b, %c : !gpu.mma_matrix<16x16xf16, "BOp">, !gpu.mma_matrix<16x16xf16, "AOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:65:3: error: 'gpu.subgroup_mma_compute' op operands must be in the order AOp, BOp, COp, not BOp, AOp, COp (load each with the matching !gpu.mma_matrix operand)

// -----

func.func @shapes(%a: !gpu.mma_matrix<16x8xf16, "AOp">, %b: !gpu.mma_matrix<16x16xf16, "BOp">, %c: !gpu.mma_matrix<16x16xf32, "COp">) {
  %d = gpu.subgroup_mma_compute %a, %b, %c : !gpu.mma_matrix<16x8xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:73:3: error: 'gpu.subgroup_mma_compute' op operand shapes do not satisfy matmul constraints: A is 16x8, B 16x16, C 16x16; A must be MxK, B KxN and C MxN

// -----

func.func @mixed_inputs(%a: !gpu.mma_matrix<16x16xf16, "AOp">, %b: !gpu.mma_matrix<16x16xf32, "BOp">, %c: !gpu.mma_matrix<16x16xf32, "COp">) {
  %d = gpu.subgroup_mma_compute %a, %b, %c : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf32, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:81:3: error: 'gpu.subgroup_mma_compute' op A and B must have the same element type, not f16 and f32

// -----

func.func @result_type(%a: !gpu.mma_matrix<16x16xf16, "AOp">, %b: !gpu.mma_matrix<16x16xf16, "BOp">, %c: !gpu.mma_matrix<16x16xf32, "COp">) {
  %d = "gpu.subgroup_mma_compute"(%a, %b, %c) : (!gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp">, !gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf16, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:89:3: error: 'gpu.subgroup_mma_compute' op result 'res' at position 0 does not verify:

// -----

func.func @a_transpose(%a: !gpu.mma_matrix<16x16xf16, "AOp">, %b: !gpu.mma_matrix<16x16xf16, "BOp">, %c: !gpu.mma_matrix<16x16xf32, "COp">) {
  %d = gpu.subgroup_mma_compute %a, %b, %c {a_transpose} : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:97:3: error: 'gpu.subgroup_mma_compute' op a_transpose is not supported by vyre's executors: load the operand with `transpose` instead

// -----

func.func @constant_type(%x: f16) {
  %c = "gpu.subgroup_mma_constant_matrix"(%x) : (f16) -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:105:3: error: 'gpu.subgroup_mma_constant_matrix' op the value has type f16, the matrix elements f32: they must be the same

// -----

func.func @shape_rank(%x: f32) {
  %c = gpu.subgroup_mma_constant_matrix %x : !gpu.mma_matrix<16x16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:113:3: error: !gpu.mma_matrix has 2 positive dimensions (rows x columns), not [16, 16, 16]

// -----

func.func @maxf(%a: !gpu.mma_matrix<16x16xf32, "COp">) {
  %m = gpu.subgroup_mma_elementwise maxf %a, %a : (!gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:121:3: error: 'gpu.subgroup_mma_elementwise' op vyre executes subgroup_mma_elementwise addf, subf, mulf, divf, negatef only (float arithmetic on whole cooperative matrices), not maxf: store the matrix and compute on its elements

// -----

func.func @arity(%a: !gpu.mma_matrix<16x16xf32, "COp">) {
  %m = gpu.subgroup_mma_elementwise addf %a : (!gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:129:3: error: 'gpu.subgroup_mma_elementwise' op addf takes 2 matrix operand(s), not 1

// -----

func.func @mixed_types(%a: !gpu.mma_matrix<16x16xf32, "COp">, %h: !gpu.mma_matrix<16x16xf16, "COp">) {
  %m = gpu.subgroup_mma_elementwise addf %a, %h : (!gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf16, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:137:3: error: 'gpu.subgroup_mma_elementwise' op addf's operands and result have one type: an operand is !gpu.mma_matrix<16x16xf16, "COp">, the result !gpu.mma_matrix<16x16xf32, "COp">

// -----

func.func @unknown_kind(%a: !gpu.mma_matrix<16x16xf32, "COp">) {
  %m = gpu.subgroup_mma_elementwise powf %a, %a : (!gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:145:37: error: element-wise operation must be one of addf, mulf, subf, maxf, minf, divf, addi, muli, subi, divs, divu, negatef, negates, extf

// -----

func.func @extract_two_indices(%a: !gpu.mma_matrix<16x16xf32, "COp">, %i: index) {
  %x = gpu.subgroup_mma_extract_thread_local %a[%i, %i] : !gpu.mma_matrix<16x16xf32, "COp"> -> f32
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:153:3: error: 'gpu.subgroup_mma_extract_thread_local' op takes one index, the element's position in the lane's share, not 2

// -----

func.func @extract_type(%a: !gpu.mma_matrix<16x16xf32, "COp">, %i: index) {
  %x = gpu.subgroup_mma_extract_thread_local %a[%i] : !gpu.mma_matrix<16x16xf32, "COp"> -> f16
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:161:3: error: 'gpu.subgroup_mma_extract_thread_local' op the result has type f16, the matrix elements f32: they must be the same

// -----

func.func @insert_type(%a: !gpu.mma_matrix<16x16xf32, "COp">, %v: f16, %i: index) {
  %x = gpu.subgroup_mma_insert_thread_local %v, %a[%i] : f16, !gpu.mma_matrix<16x16xf32, "COp"> -> !gpu.mma_matrix<16x16xf32, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:169:3: error: 'gpu.subgroup_mma_insert_thread_local' op the value has type f16, the matrix elements f32: they must be the same

// -----

func.func @insert_result(%a: !gpu.mma_matrix<16x16xf32, "COp">, %v: f32, %i: index) {
  %x = "gpu.subgroup_mma_insert_thread_local"(%v, %a, %i) : (f32, !gpu.mma_matrix<16x16xf32, "COp">, index) -> !gpu.mma_matrix<16x16xf16, "COp">
  func.return
}
// CHECK: {{.*}}gpu_mma_errors.mlir:177:3: error: 'gpu.subgroup_mma_insert_thread_local' op the result has type !gpu.mma_matrix<16x16xf16, "COp">, the matrix !gpu.mma_matrix<16x16xf32, "COp">: they must be the same

// EXIT: error:
// EXIT-NOT: Traceback
