// REQUIRES: mlir-opt-22
// RUN: vyre-opt %S/../passes/split_kv_kernel_merge.mlir -p 'vyre-split-kv{splits=4 merge=kernel merge_teams=2},vyre-to-gpu{optimize=none}' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %S/../passes/split_kv_kernel_merge.mlir -p 'vyre-split-kv{splits=4 merge=kernel merge_teams=2},vyre-to-gpu{optimize=exact}' --print-op-generic | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %S/../passes/split_kv_kernel_merge.mlir -p 'vyre-split-kv{splits=4 merge=kernel merge_teams=2},vyre-to-gpu{device=h200}' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s

// Upstream MLIR 22 accepts a merge kernel whose teams of lanes meet in
// workgroup memory, at every optimisation level: two workgroup arrays
// (the teams' maxima, then their sums) and a barrier after each.
// CHECK:      gpu.module @flash_attention_2_merge
// CHECK:        gpu.func @flash_attention_2_merge({{.*}}) kernel
// CHECK:          memref.alloc() : memref<64xf32, 3>
// CHECK-NEXT:     memref.alloc() : memref<128xf32, 3>
// CHECK:          gpu.barrier
// CHECK:          gpu.barrier
// CHECK:          gpu.return
