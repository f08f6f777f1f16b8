// RUN: vyre-opt %examples/flash_attention_2.mlir -p 'vyre-to-gpu{optimize=none}' | filecheck %s
// RUN: vyre-opt %examples/mla_decode.mlir -p 'vyre-to-gpu{optimize=none}' | filecheck %s --check-prefix=MLA
// RUN: vyre-opt %examples/flash_attention_2.mlir -p 'vyre-to-gpu{device=h200}' | filecheck %s --check-prefix=DEFAULT
// RUN: vyre-opt %examples/mla_decode.mlir -p vyre-to-gpu --print-op-generic | filecheck %s --check-prefix=NO-VYRE
// RUN: vyre-opt %examples/flash_attention_2.mlir -p vyre-to-gpu --print-op-generic | filecheck %s --check-prefix=NO-VYRE
// RUN: vyre-opt %examples/flash_attention_2.mlir -p vyre-to-gpu | filecheck %s --check-prefix=GENERIC
// RUN: not vyre-opt %examples/flash_attention_2.mlir -p 'vyre-to-gpu{device=tpu}' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not vyre-opt %examples/flash_attention_2.mlir -p 'vyre-resize-workgroup{size=2048},vyre-to-gpu{device=h200}' 2>&1 | filecheck %s --check-prefix=TOO-WIDE
// RUN: cat %examples/flash_attention_2.mlir %examples/flash_attention_2.mlir > %t.mlir
// RUN: not vyre-opt %t.mlir -p vyre-to-gpu 2>&1 | filecheck %s --check-prefix=NESTED
// Two files concatenated parse as two modules nested in a third: refused.
// NESTED: error: vyre-to-gpu: this builtin.module is nested in another (2 nested, as two concatenated files give); put a program's kernels in one builtin.module, or lower each file on its own
// NO-VYRE: "gpu.func"
// NO-VYRE-NOT: "vyre.

// The whole lowering leaves only gpu/arith/scf/math/memref ops; optimize=none
// keeps the seed's layout, with the scratch arrays in workgroup memory.
// CHECK:     builtin.module attributes {gpu.container_module}
// CHECK:       "gpu.func"() <{function_type = (memref<1600xf32>, memref<1600xf32>, memref<1600xf32>, memref<1600xf32>) -> (), kernel}>
// CHECK:         %q_scratch = memref.alloc() {vyre.role = #vyre<scratch_role q_scratch>} : memref<1024xf32, 3 : i64>
// CHECK-NEXT:    %score_tile = memref.alloc() {vyre.role = #vyre<scratch_role score_tile>} : memref<2048xf32, 3 : i64>
// CHECK-NEXT:    %o_acc = memref.alloc() {vyre.role = #vyre<scratch_role o_acc>} : memref<1024xf32, 3 : i64>
// CHECK:         scf.for %tile_idx
// CHECK:         math.exp
// CHECK:       vyre.launch = #vyre.launch<items = 100, workgroup = [64, 1, 1], grid = [2, 1, 1],

// For MLA decode: one item per head, one workgroup, the rotary part behind an scf.if.
// MLA:       "gpu.func"() <{function_type = (memref<64xf32>, memref<800xf32>, memref<400xf32>, memref<512xf32>, memref<512xf32>, memref<64xf32>) -> (), kernel}>
// MLA:         %{{.*}} = scf.if %{{.*}} -> (f32) {
// MLA:       vyre.launch = #vyre.launch<items = 4, workgroup = [64, 1, 1], grid = [1, 1, 1],
// MLA-SAME:  #vyre.buffer<name = "kv_cache", binding = 1, access = read, shape = [100, 8], dtype = f32>

// The default also runs the optimisations: private scratch, unrolled loops.
// For the H200, on this small grid (two workgroups) each row is split over
// two lanes (vyre-split-head-dim), which keep 8 of its 16 dims each.
// DEFAULT:       %q_scratch = memref.alloca() : memref<8xf32>
// DEFAULT-NEXT:  %score_tile = memref.alloca() : memref<32xf32>
// DEFAULT-NEXT:  %o_acc = memref.alloca() : memref<8xf32>
// DEFAULT-NOT:   memref.alloc()
// The tile's 16 keys' dot products (retiled from 32; at most 16 per tile,
// so no more are jammed) advance side by side in one loop over the lane's
// chunks of 4 dims, each as 4-wide vector loads of k (100 rows leave the
// last workgroup partial, so the default's staged K/V tiles do not apply
// here); then each key's two halves are added across the lanes.
// DEFAULT:       scf.for %{{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// DEFAULT:         vector.load %k[
// DEFAULT:       gpu.shuffle xor


// `device` names the limits the default fits (generic when none is named):
// the generic profile assumes no subgroup operations, so each row stays on
// one lane.
// GENERIC:     %q_scratch = memref.alloca() : memref<16xf32>
// GENERIC-NOT: gpu.shuffle
// UNKNOWN: error: unknown device 'tpu'; choose one of generic, h200, lavapipe, vulkan

// The default promises a kernel the device runs: a workgroup set wider by a
// pass before it is refused, naming the fix.
// TOO-WIDE: flash_attention_2.mlir:4:1: error: vyre-to-gpu: kernel @flash_attention_2 needs 0 bytes of workgroup memory and 2048 lanes, more than device 'h200' allows (49152 bytes, 1024 lanes); if a pass before vyre-to-gpu set this (vyre-resize-workgroup{size=...}), give it a size the device allows
