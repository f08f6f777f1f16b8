// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The record of a per-head product (#vyre.head_product, dialects/mla.py,
// read by vyre-projection-tensor-cores): what verifies and what is refused.

// A record prints back.
// CHECK-LABEL: vyre.kernel @k0 items 2 workgroup_size 64 attributes {vyre.head_product = #vyre.head_product<source = "q", weights = "w_uk", dest = "q_lat", sequences = 32, heads = 16, depth = 128, width = 512, transposed = true>}
builtin.module {
  vyre.kernel @k0 items 2 workgroup_size 64 attributes {vyre.head_product = #vyre.head_product<source = "q", weights = "w_uk", dest = "q_lat", sequences = 32, heads = 16, depth = 128, width = 512, transposed = true>} {
  }
}

// -----

// CHECK: error: #vyre.head_product: 'depth' must be in [1, 2^32), got 0
// expected-error @+2 {{#vyre.head_product: 'depth' must be in [1, 2^32), got 0}}
builtin.module {
  vyre.kernel @k1 items 2 workgroup_size 64 attributes {vyre.head_product = #vyre.head_product<source = "q", weights = "w_uk", dest = "q_lat", sequences = 1, heads = 1, depth = 0, width = 16, transposed = true>} {
  }
}

// -----

// CHECK: error: #vyre.head_product: source, weights and dest must be three buffers, got 'q', 'w_uk', 'q'
// expected-error @+2 {{#vyre.head_product: source, weights and dest must be three buffers, got 'q', 'w_uk', 'q'}}
builtin.module {
  vyre.kernel @k2 items 2 workgroup_size 64 attributes {vyre.head_product = #vyre.head_product<source = "q", weights = "w_uk", dest = "q", sequences = 1, heads = 1, depth = 16, width = 16, transposed = false>} {
  }
}

// -----

// CHECK: error: #vyre.head_product: its buffers hold more than u32 elements
// expected-error @+2 {{#vyre.head_product: its buffers hold more than u32 elements}}
builtin.module {
  vyre.kernel @k3 items 2 workgroup_size 64 attributes {vyre.head_product = #vyre.head_product<source = "q", weights = "w_uk", dest = "q_lat", sequences = 1, heads = 65536, depth = 256, width = 512, transposed = false>} {
  }
}
