// RUN: vyre-opt %s -p convert-vyre-to-gpu --verify-diagnostics | filecheck %s
// RUN: not vyre-opt %s -p convert-vyre-to-gpu 2>&1 | filecheck %s

// The skeleton must be expanded first: the pass says which pass to run.
builtin.module {
  vyre.kernel @early items 1 workgroup_size 64 {
    %out = vyre.buffer "out" binding 0 write [1] : memref<1xf32>
    %one = arith.constant 1.0 : f32
    %b = vyre.bounded_score %one : f32
    %zero = arith.constant 0 : index
    memref.store %b, %out[%zero] : memref<1xf32>
  }
}
// CHECK: {{.*}}convert_vyre_to_gpu_errors.mlir:9:5: error: convert-vyre-to-gpu found vyre.bounded_score in kernel @early; run vyre-inline-fragments and vyre-expand-stability first (or the vyre-to-gpu pipeline)
