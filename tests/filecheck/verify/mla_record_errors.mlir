// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The record vx.mla_decode leaves on its kernel (#vyre.mla, dialects/mla.py,
// read by vyre-absorb-mla): what verifies and what is refused.

// A record of every field verifies and prints back.
// CHECK-LABEL: vyre.kernel @k0 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2, batch = 3, kv_lens = true, page_size = 4, num_pages = 2>}
builtin.module {
  vyre.kernel @k0 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2, batch = 3, kv_lens = true, page_size = 4, num_pages = 2>} {
  }
}

// -----

// The builder leaves batch 1 out; given, it prints back.
// CHECK-LABEL: vyre.kernel @k1 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2, batch = 1>}
builtin.module {
  vyre.kernel @k1 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2, batch = 1>} {
  }
}

// -----

// The rotary dims are some of the head's.
// CHECK: error: #vyre.mla: qk_rope_head_dim 5 is larger than head_dim 4
// expected-error @+2 {{#vyre.mla: qk_rope_head_dim 5 is larger than head_dim 4}}
builtin.module {
  vyre.kernel @k2 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 5>} {
  }
}

// -----

// Every dimension is positive.
// CHECK: error: #vyre.mla: 'seq_len' must be in [1, 2^32), got 0
// expected-error @+2 {{#vyre.mla: 'seq_len' must be in [1, 2^32), got 0}}
builtin.module {
  vyre.kernel @k3 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 0, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2>} {
  }
}

// -----

// Pages imply run-time lengths, as the builder's arguments do.
// CHECK: error: #vyre.mla: a paged cache needs kv_lens = true
// expected-error @+2 {{#vyre.mla: a paged cache needs kv_lens = true}}
builtin.module {
  vyre.kernel @k4 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2, page_size = 4, num_pages = 2>} {
  }
}

// -----

// page_size and num_pages go together.
// CHECK: error: #vyre.mla: give both page_size and num_pages, or neither
// expected-error @+2 {{#vyre.mla: give both page_size and num_pages, or neither}}
builtin.module {
  vyre.kernel @k5 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2, kv_lens = true, page_size = 4>} {
  }
}

// -----

// A dimension missing.
// CHECK: error: #vyre.mla needs field(s) qk_rope_head_dim
// expected-error @+2 {{#vyre.mla needs field(s) qk_rope_head_dim}}
builtin.module {
  vyre.kernel @k6 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3>} {
  }
}

// -----

// A field the builder does not have.
// CHECK: error: #vyre.mla has no field 'ragged'; its fields are seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, batch, kv_lens, page_size, num_pages
// expected-error @+2 {{#vyre.mla has no field 'ragged'; its fields are seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, batch, kv_lens, page_size, num_pages}}
builtin.module {
  vyre.kernel @k7 items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2, ragged = 1>} {
  }
}
