// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Storage buffers hold f32, f16 or bf16 (the builders' dtype=); half
// buffers verify, as the q and out of the skeleton too.
// CHECK-LABEL: vyre.kernel @half_buffers
// CHECK:         %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xbf16>
// CHECK:         %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf16>
builtin.module {
  vyre.kernel @half_buffers items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xbf16>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf16>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xbf16>, memref<8xf16>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}

// -----

// Any other element type is refused, with the choices.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    // expected-error @+1 {{buffer 'q' must be a static 1-D memref of f32, f16 or bf16 (e.g. memref<4096xf32> or memref<4096xbf16>: the builders' dtype=), got memref<8xf64>}}
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf64>
  }
}

// -----

builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    // expected-error @+1 {{buffer 'k' must be a static 1-D memref of f32, f16 or bf16 (e.g. memref<4096xf32> or memref<4096xbf16>: the builders' dtype=), got memref<8xi16>}}
    %k = vyre.buffer "k" binding 0 read [4, 2] : memref<8xi16>
  }
}

// -----

// A half buffer's element count follows its shape too; the fix names its type.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    // expected-error @+1 {{buffer 'q' has shape [4, 3] (12 elements) but type memref<8xf16>; make the memref hold exactly 12 f16}}
    %q = vyre.buffer "q" binding 0 read [4, 3] : memref<8xf16>
  }
}

// -----

// Scratch arrays hold the recurrence's own state in f32, or f16 and bf16
// tiles that subgroup matrix ops read (vyre-tensor-cores): not f64.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    // expected-error @+1 {{scratch 'o_acc' must be a static 1-D memref of f32, f16 or bf16 (e.g. memref<4096xf32>), got memref<128xf64>}}
    %oa = vyre.scratch "o_acc" : memref<128xf64>
  }
}
