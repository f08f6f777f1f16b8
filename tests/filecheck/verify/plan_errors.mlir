// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not vyre-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// A recorded plan (#vyre.plan, dialects/plan.py) refuses, where it is
// parsed, a field that no pass could follow.
// EXIT: plan_errors.mlir:9:42: error: #vyre.plan: lanes must be >= 1, got 0

// Workgroups have lanes.
builtin.module attributes {t = #vyre.plan<device = "x", lanes = 0, tile_size = 16, kv_splits = 1, merge = none, merge_teams = 1, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: plan_errors.mlir:9:42: error: #vyre.plan: lanes must be >= 1, got 0

// -----

// The parts' sums are added pairwise.
builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 1, merge = none, merge_teams = 1, dim_parts = 3, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: #vyre.plan: dim_parts must be a power of two, got 3

// -----

// A lane's chunk of dims is a vector load's worth.
builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 1, merge = none, merge_teams = 1, dim_parts = 2, dim_chunk = 6, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: #vyre.plan: dim_chunk must be a power of two, got 6

// -----

// Splits need a merge, and no split has one.
builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 4, merge = none, merge_teams = 1, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: #vyre.plan: merge must be none exactly when kv_splits is 1 (kv_splits 4, merge none)

// -----

builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 1, merge = kernel, merge_teams = 1, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: #vyre.plan: merge must be none exactly when kv_splits is 1 (kv_splits 1, merge kernel)

// -----

builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 1, merge = none, merge_teams = 1, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = -4, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: #vyre.plan: stage_bytes must be >= 0, got -4

// -----

// Teams share a merge kernel's splits.
builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 8, merge = workgroup, merge_teams = 2, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: #vyre.plan: merge_teams 2 needs merge = kernel and must divide kv_splits (8): teams share a merge kernel's splits

// -----

builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 8, merge = kernel, merge_teams = 16, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: #vyre.plan: merge_teams 16 needs merge = kernel and must divide kv_splits (8): teams share a merge kernel's splits

// -----

// Their runs' sums are added pairwise.
builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 12, merge = kernel, merge_teams = 3, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: #vyre.plan: merge_teams must be a power of two, got 3

// -----

// Only the skeleton's scratch arrays are interleaved.
builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 1, merge = none, merge_teams = 1, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [out], hoist_loads = []>} {}
// CHECK: error: #vyre.plan: interleave names scratch arrays of the skeleton (q_scratch, score_tile, o_acc), got out

// -----

builtin.module attributes {t = #vyre.plan<device = "x", lanes = 64, tile_size = 16, kv_splits = 2, merge = sometimes, merge_teams = 1, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: Expected `none`, `workgroup`, or `kernel`

// -----

// The fields come in their order.
builtin.module attributes {t = #vyre.plan<device = "x", tile_size = 16, lanes = 64, kv_splits = 1, merge = none, merge_teams = 1, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>} {}
// CHECK: error: Expected 'lanes'

// -----

// A plan on the matrix units (vyre-tensor-cores' tiling): keys come in
// matrix tiles of 16 ...
builtin.module attributes {t = #vyre.tensor_cores<keys = 24, row_tiles = 1, stage = false, prefetch = false, registers = false, stage_q = false, skip_rescale = false, rolled = false, pieces = 1, unroll = 1>} {}
// CHECK: error: #vyre.tensor_cores: keys must be a positive multiple of 16, got 24

// -----

// ... a subgroup owns at least one block of rows ...
builtin.module attributes {t = #vyre.tensor_cores<keys = 16, row_tiles = 0, stage = false, prefetch = false, registers = false, stage_q = false, skip_rescale = false, rolled = false, pieces = 1, unroll = 1>} {}
// CHECK: error: #vyre.tensor_cores: row_tiles must be >= 1, got 0

// -----

// ... and only staged tiles are prefetched.
builtin.module attributes {t = #vyre.tensor_cores<keys = 16, row_tiles = 2, stage = false, prefetch = true, registers = false, stage_q = false, skip_rescale = false, rolled = false, pieces = 1, unroll = 1>} {}
// CHECK: error: #vyre.tensor_cores: prefetch double-buffers staged tiles, so it needs stage = true

// -----

// ... and an operand is at least one part.
builtin.module attributes {t = #vyre.tensor_cores<keys = 16, row_tiles = 2, stage = true, prefetch = false, registers = true, stage_q = false, skip_rescale = false, rolled = false, pieces = 0, unroll = 1>} {}
// CHECK: error: #vyre.tensor_cores: pieces must be >= 1, got 0

// -----

// ... and a trip of the tile loop computes at least one tile.
builtin.module attributes {t = #vyre.tensor_cores<keys = 16, row_tiles = 2, stage = true, prefetch = false, registers = true, stage_q = false, skip_rescale = false, rolled = false, pieces = 1, unroll = 0>} {}
// CHECK: error: #vyre.tensor_cores: unroll must be >= 1, got 0

// -----

// A blocking (#vyre.block_product) has lanes ...
builtin.module attributes {t = #vyre.block_product<lanes = 0, key_lanes = 8, rows = 2, keys = 4>} {}
// CHECK: error: #vyre.block_product: lanes must be >= 1, got 0

// -----

// ... and a row's keys over a power of two of them, which its lanes divide.
builtin.module attributes {t = #vyre.block_product<lanes = 128, key_lanes = 6, rows = 2, keys = 4>} {}
// CHECK: error: #vyre.block_product: key_lanes (6) must be a power of two that divides lanes (128)

// -----

// MLA's latent attention on the matrix units (#vyre.latent_tensor_cores):
// a workgroup takes at least one block of 16 rows ...
builtin.module attributes {t = #vyre.latent_tensor_cores<row_tiles = 0, splits = 1, row_groups = 1, stage = false, skip_rescale = false>} {}
// CHECK: error: #vyre.latent_tensor_cores: row_tiles must be >= 1, got 0

// -----

// ... and a row block's keys go to at least one workgroup.
builtin.module attributes {t = #vyre.latent_tensor_cores<row_tiles = 1, splits = -2, row_groups = 1, stage = true, skip_rescale = false>} {}
// CHECK: error: #vyre.latent_tensor_cores: splits must be >= 1, got -2

// -----

// ... and its rows come in at least one group of four subgroups.
builtin.module attributes {t = #vyre.latent_tensor_cores<row_tiles = 1, splits = 1, row_groups = 0, stage = true, skip_rescale = false>} {}
// CHECK: error: #vyre.latent_tensor_cores: row_groups must be >= 1, got 0

// -----

// ... two at most ...
builtin.module attributes {t = #vyre.latent_tensor_cores<row_tiles = 1, splits = 1, row_groups = 4, stage = true, skip_rescale = false>} {}
// CHECK: error: #vyre.latent_tensor_cores: row_groups must be one of (1, 2), got 4

// -----

// ... which share the staged tiles.
builtin.module attributes {t = #vyre.latent_tensor_cores<row_tiles = 1, splits = 1, row_groups = 2, stage = false, skip_rescale = false>} {}
// CHECK: error: #vyre.latent_tensor_cores: row groups share the staged tiles: row_groups 2 needs stage = true

// -----

// A per-head product on the matrix units (#vyre.projection_tensor_cores):
// a workgroup takes at least one block of 16 sequences ...
builtin.module attributes {t = #vyre.projection_tensor_cores<row_tiles = 0, col_blocks = 1>} {}
// CHECK: error: #vyre.projection_tensor_cores: row_tiles must be >= 1, got 0

// -----

// ... and each subgroup at least one block of 16 columns.
builtin.module attributes {t = #vyre.projection_tensor_cores<row_tiles = 2, col_blocks = 0>} {}
// CHECK: error: #vyre.projection_tensor_cores: col_blocks must be >= 1, got 0
