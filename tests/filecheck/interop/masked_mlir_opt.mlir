// REQUIRES: mlir-opt-22
// RUN: vyre-opt %examples/gqa_causal_alibi.mlir -p vyre-use-exp2,vyre-to-gpu | mlir-opt-22 --allow-unregistered-dialect | filecheck %s

// A masked kernel with a score modifier lowers to IR upstream MLIR accepts:
// the tile-class branches are scf.if, the modifiers plain arith/math.
// CHECK: gpu.func @flex_attention
// CHECK: arith.divui %global_id_x, %c64
// CHECK: scf.for
// CHECK:   scf.if %{{.*}} -> (f32, f32)
// CHECK:     scf.if %{{.*}} -> (f32, f32)
// CHECK:       math.exp2
