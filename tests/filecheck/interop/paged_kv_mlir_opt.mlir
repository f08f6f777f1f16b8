// REQUIRES: mlir-opt-22
// RUN: vyre-opt %S/../passes/paged_kv.mlir -p 'vyre-to-gpu{optimize=none}' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %S/../passes/paged_kv.mlir -p 'vyre-to-gpu{optimize=exact}' --print-op-generic | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %S/../passes/paged_kv.mlir -p 'vyre-to-gpu{device=h200}' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %S/../passes/paged_kv.mlir -p 'vyre-to-gpu{device=lavapipe}' --print-op-generic | mlir-opt-22 --allow-unregistered-dialect | filecheck %s

// Upstream MLIR 22 accepts a paged kernel with ragged lengths at every
// optimisation level: i32 storage buffers (kv_lens, block_table), their
// loads clamped with arith.maxsi/minsi and converted with arith.index_cast,
// and a tile loop bounded at run time.
// CHECK:     gpu.func @flex_attention(%{{.*}}: memref<8xf32>, %{{.*}}: memref<16xf32>, %{{.*}}: memref<16xf32>, %{{.*}}: memref<8xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<2xi32>, %{{.*}}: memref<6xi32>) kernel
// CHECK:       memref.load %{{.*}} : memref<2xi32>
// CHECK:       arith.maxsi %{{.*}} : i32
// CHECK:       arith.index_cast %{{.*}} : i32 to index
// CHECK:       memref.load %{{.*}} : memref<6xi32>
