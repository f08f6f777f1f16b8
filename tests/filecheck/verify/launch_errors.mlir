// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not vyre-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// The typed launch contract (dialects/launch.py): each attribute refuses,
// where it is parsed, what it can see is wrong on its own. What ties it to
// the function body (argument types, grid against items) is the loader's.
// EXIT: launch_errors.mlir:10:44: error: a buffer needs a name

// A buffer has a name.
builtin.module attributes {t = #vyre.buffer<name = "", binding = 0, access = read, shape = [4], dtype = f32>} {}
// CHECK: launch_errors.mlir:10:44: error: a buffer needs a name

// -----

// Bindings are i32 on the device.
builtin.module attributes {t = #vyre.buffer<name = "q", binding = 2147483648, access = read, shape = [4], dtype = f32>} {}
// CHECK: error: buffer 'q': binding 2147483648 is outside [0, 2^31); bindings are i32 on the device

// -----

builtin.module attributes {t = #vyre.buffer<name = "q", binding = 0, access = read, shape = [4, -1], dtype = f32>} {}
// CHECK: error: buffer 'q': shape [4, -1] must have at least one extent, none negative

// -----

builtin.module attributes {t = #vyre.buffer<name = "q", binding = 0, access = read, shape = [4], dtype = f64>} {}
// CHECK: error: buffer 'q': dtype f64 is none of f32, f16, bf16, i32

// -----

// A captured table's data belongs to a read buffer and fills it.
builtin.module attributes {t = #vyre.buffer<name = "t", binding = 0, access = write, shape = [2], dtype = i32, data = array<i32: 1, 2>>} {}
// CHECK: error: buffer 't': 'data' must be an array of its 2 elements on a read buffer (a captured table), got 2 on a write buffer

// -----

builtin.module attributes {t = #vyre.buffer<name = "t", binding = 0, access = read, shape = [3], dtype = i32, data = array<i32: 1, 2>>} {}
// CHECK: error: buffer 't': 'data' must be an array of its 3 elements on a read buffer (a captured table), got 2 on a read buffer

// -----

// An access the enum does not have.
builtin.module attributes {t = #vyre.buffer<name = "q", binding = 0, access = readwrite, shape = [4], dtype = f32>} {}
// CHECK: error: Expected `read`, `write`, or `temp`

// -----

// Fields are known, given once, and the required ones are there.
builtin.module attributes {t = #vyre.buffer<name = "q", bind = 0>} {}
// CHECK: error: #vyre.buffer has no field 'bind'; its fields are name, binding, access, shape, dtype, data

// -----

builtin.module attributes {t = #vyre.buffer<name = "q", name = "k">} {}
// CHECK: error: field 'name' of #vyre.buffer given twice

// -----

builtin.module attributes {t = #vyre.buffer<name = "q", access = read, shape = [4], dtype = f32>} {}
// CHECK: error: #vyre.buffer needs field(s) binding

// -----

// Items are u32 on the device.
builtin.module attributes {t = #vyre.launch<items = 4294967296, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = []>} {}
// CHECK: error: #vyre.launch: items 4294967296 is outside [0, 2^32)

// -----

builtin.module attributes {t = #vyre.launch<items = 4, workgroup = [64, 0, 1], grid = [1, 1, 1], buffers = []>} {}
// CHECK: error: #vyre.launch: 'workgroup' must be 3 sizes in [1, 2^32) (x, y, z), got [64, 0, 1]

// -----

builtin.module attributes {t = #vyre.launch<items = 4, workgroup = [64, 1, 1], grid = [1, 1], buffers = []>} {}
// CHECK: error: #vyre.launch: 'grid' must be 3 sizes in [1, 2^32) (x, y, z), got [1, 1]

// -----

// A binding and a name belong to one buffer.
builtin.module attributes {t = #vyre.launch<items = 4, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [
    #vyre.buffer<name = "q", binding = 0, access = read, shape = [4], dtype = f32>,
    #vyre.buffer<name = "out", binding = 0, access = write, shape = [4], dtype = f32>]>} {}
// CHECK: error: #vyre.launch: two buffers share a binding: [0, 0]; give each buffer its own binding

// -----

builtin.module attributes {t = #vyre.launch<items = 4, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [
    #vyre.buffer<name = "q", binding = 0, access = read, shape = [4], dtype = f32>,
    #vyre.buffer<name = "q", binding = 1, access = write, shape = [4], dtype = f32>]>} {}
// CHECK: error: #vyre.launch: two buffers share a name: ['q', 'q']; give each buffer its own name

// -----

builtin.module attributes {t = #vyre.launch<items = 4, workgroup = [64, 1, 1], grid = [1, 1, 1]>} {}
// CHECK: error: #vyre.launch needs field(s) buffers

// -----

// The skeleton's sizes are positive u32s.
builtin.module attributes {t = #vyre.skeleton<items = 4, seq_len = 8, head_dim = 4, v_head_dim = 4, tile_size = 0, kv_splits = 1, dim_parts = 1>} {}
// CHECK: error: #vyre.skeleton: 'tile_size' must be in [1, 2^32), got 0

// -----

builtin.module attributes {t = #vyre.skeleton<items = 4, seq_len = 8>} {}
// CHECK: error: #vyre.skeleton needs field(s) head_dim, v_head_dim, tile_size, kv_splits, dim_parts

// -----

// A scratch role the enum does not have.
builtin.module attributes {t = #vyre<scratch_role k_scratch>} {}
// CHECK: error: Expected `q_scratch`, `score_tile`, `o_acc`, or `kv_tile`
