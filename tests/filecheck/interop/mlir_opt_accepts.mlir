// REQUIRES: mlir-opt-22
// RUN: vyre-opt %examples/flash_attention_2.mlir -p 'vyre-to-gpu{device=h200}' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %examples/flash_attention_2.mlir -p 'vyre-to-gpu{device=h200}' --print-op-generic | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %examples/mla_decode.mlir -p vyre-to-gpu | mlir-opt-22 --allow-unregistered-dialect | filecheck %s --check-prefix=MLA
// RUN: vyre-opt %examples/flash_attention_2.mlir -p 'vyre-to-gpu{optimize=none}' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s --check-prefix=SEED

// Upstream MLIR 22 parses and verifies the lowered IR unchanged, in custom
// or generic form (tests/test_mlir_opt.py covers every level), and sees a
// kernel (gpu.kernel), workgroup memory (space 3), the gpu ids and, lowered
// for the H200 (which shuffles across lanes), the shuffles that add the
// halves of a row split over two lanes.
// CHECK:      module attributes {gpu.container_module}
// CHECK:        gpu.module @flash_attention_2
// CHECK-NEXT:     gpu.func @flash_attention_2(%{{.*}}: memref<1600xf32>, %{{.*}}: memref<1600xf32>, %{{.*}}: memref<1600xf32>, %{{.*}}: memref<1600xf32>) kernel
// CHECK:          memref.alloca() : memref<8xf32>
// CHECK:          gpu.global_id x
// CHECK:          gpu.thread_id x
// CHECK:          gpu.shuffle  xor
// CHECK:          gpu.return

// MLA:        gpu.func @mla_decode({{.*}}) kernel
// MLA:          math.exp

// SEED:         memref.alloc() {vyre.role = #vyre<scratch_role q_scratch>} : memref<1024xf32, 3>
