// REQUIRES: mlir-opt-22
// RUN: vyre-opt %S/../passes/convert_vyre_to_gpu_program.mlir -p vyre-to-gpu | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %S/../passes/convert_vyre_to_gpu_program.mlir -p 'vyre-to-gpu{optimize=none}' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s

// Upstream MLIR 22 accepts a lowered program of two kernels unchanged: two
// gpu.modules in module order, each with its kernel.
// CHECK:      module attributes {gpu.container_module}
// CHECK:        gpu.module @partials
// CHECK-NEXT:     gpu.func @partials(%{{.*}}: memref<8xf32>, %{{.*}}: memref<8xf32>) kernel
// CHECK:          gpu.return
// CHECK:        gpu.module @merge
// CHECK-NEXT:     gpu.func @merge(%{{.*}}: memref<8xf32>, %{{.*}}: memref<8xf32>, %{{.*}}: memref<8xf32>) kernel
// CHECK:          gpu.return
