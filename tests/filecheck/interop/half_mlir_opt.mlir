// REQUIRES: mlir-opt-22
// RUN: vyre-opt %S/../passes/half_precision.mlir -p 'vyre-to-gpu{optimize=none}' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %S/../passes/half_precision.mlir -p 'vyre-to-gpu{optimize=exact}' --print-op-generic | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %S/../passes/half_precision.mlir -p 'vyre-to-gpu{device=h200}' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %S/../passes/half_precision.mlir -p 'vyre-to-gpu{device=lavapipe}' --print-op-generic | mlir-opt-22 --allow-unregistered-dialect | filecheck %s

// Upstream MLIR 22 accepts a kernel of f16 buffers at every optimisation
// level: f16 memrefs, arith.extf to f32 after the loads, arith.truncf
// before the store of the output.
// CHECK:     gpu.func @flash_attention_2(%{{.*}}: memref<256xf16>, %{{.*}}: memref<256xf16>, %{{.*}}: memref<256xf16>, %{{.*}}: memref<256xf16>) kernel
// CHECK:       arith.extf %{{.*}} : f16 to f32
// CHECK:       arith.truncf %{{.*}} : f32 to f16
