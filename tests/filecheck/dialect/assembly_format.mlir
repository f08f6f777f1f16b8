// vyre.kernel, vyre.buffer and vyre.merge_splits are declared with
// assembly_format: each prints as written, and the generic form (the
// buffer's access is a #vyre<access ...> enum) parses back to the same op.
// RUN: vyre-opt %s | filecheck %s
// RUN: vyre-opt %s --print-op-generic | vyre-opt | filecheck %s
// RUN: vyre-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

builtin.module {
  vyre.kernel @empty items 4 workgroup_size 32 attributes {note = "nothing"} {
  }
  vyre.kernel @merge items 64 workgroup_size 64 {
    %m = vyre.buffer "m" binding 0 temp [8] : memref<8xf32>
    %l = vyre.buffer "l" binding 1 temp [8] : memref<8xf32>
    %o = vyre.buffer "o" binding 2 temp [8, 16] : memref<128xf32>
    %out = vyre.buffer "out" binding 3 write [4, 16] {note = 1 : i64} : memref<64xf16>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 4 splits 2 head_dim 16 exp2 attributes {note = 2 : i64} : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<64xf16>)
  }
  vyre.kernel @merge_lse items 64 workgroup_size 64 {
    %m = vyre.buffer "m" binding 0 temp [8] : memref<8xf32>
    %l = vyre.buffer "l" binding 1 temp [8] : memref<8xf32>
    %o = vyre.buffer "o" binding 2 temp [8, 16] : memref<128xf32>
    %out = vyre.buffer "out" binding 3 write [4, 16] {note = 1 : i64} : memref<64xf16>
    %lse = vyre.buffer "lse" binding 4 write [4] : memref<4xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) lse(%lse) keys 300 item_count 4 splits 2 head_dim 16 : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<64xf16>, memref<4xf32>)
  }
  vyre.kernel @merge_dims items 16 workgroup_size 64 {
    %m = vyre.buffer "m" binding 0 temp [8] : memref<8xf32>
    %l = vyre.buffer "l" binding 1 temp [8] : memref<8xf32>
    %o = vyre.buffer "o" binding 2 temp [8, 16] : memref<128xf32>
    %out = vyre.buffer "out" binding 3 write [4, 16] {note = 1 : i64} : memref<64xf16>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 4 splits 2 head_dim 16 dims 4 exp2 : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<64xf16>)
  }
  vyre.kernel @merge_teams items 128 workgroup_size 64 {
    %m = vyre.buffer "m" binding 0 temp [8] : memref<8xf32>
    %l = vyre.buffer "l" binding 1 temp [8] : memref<8xf32>
    %o = vyre.buffer "o" binding 2 temp [8, 16] : memref<128xf32>
    %out = vyre.buffer "out" binding 3 write [4, 16] {note = 1 : i64} : memref<64xf16>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 4 splits 2 head_dim 16 teams 2 : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<64xf16>)
  }
}

// CHECK:      vyre.kernel @empty items 4 workgroup_size 32 attributes {note = "nothing"} {
// CHECK:      vyre.kernel @merge items 64 workgroup_size 64 {
// CHECK-NEXT:   %m = vyre.buffer "m" binding 0 temp [8] : memref<8xf32>
// CHECK:        %out = vyre.buffer "out" binding 3 write [4, 16] {note = 1 : i64} : memref<64xf16>
// CHECK-NEXT:   vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 4 splits 2 head_dim 16 exp2 attributes {note = 2 : i64} : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<64xf16>)

// With the log-sum-exp, and the keys whose weight scale it undoes:
// CHECK:        vyre.merge_splits m(%m) l(%l) o(%o) out(%out) lse(%lse) keys 300 item_count 4 splits 2 head_dim 16 : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<64xf16>, memref<4xf32>)

// Four dims an invocation:
// CHECK:        vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 4 splits 2 head_dim 16 dims 4 exp2 : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<64xf16>)

// Two teams of invocations a column (32 columns of 2 splits, 64 lanes):
// CHECK:        vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 4 splits 2 head_dim 16 teams 2 : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<64xf16>)

// GENERIC: "vyre.buffer"() <{sym_name = "m", binding = 0 : i64, access = #vyre<access temp>, shape = array<i64: 8>}>
// GENERIC: "vyre.merge_splits"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{item_count = 4 : i64, splits = 2 : i64, head_dim = 16 : i64, exp2}>
// GENERIC: "vyre.merge_splits"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{item_count = 4 : i64, splits = 2 : i64, head_dim = 16 : i64, dims = 4 : i64, exp2}>
// GENERIC: "vyre.merge_splits"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{item_count = 4 : i64, splits = 2 : i64, head_dim = 16 : i64, teams = 2 : i64}>
