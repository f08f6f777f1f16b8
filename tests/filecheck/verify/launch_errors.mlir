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

// -----

// The accumulator layout (vyre_xdsl.mma_layout): every element once...
builtin.module attributes {t = #vyre.accumulator<lanes = 32, positions = [0, 0, 8, 9, 128, 129, 136, 137, 2, 3, 10, 11, 130, 131, 138, 139, 4, 5, 12, 13, 132, 133, 140, 141, 6, 7, 14, 15, 134, 135, 142, 143, 16, 17, 24, 25, 144, 145, 152, 153, 18, 19, 26, 27, 146, 147, 154, 155, 20, 21, 28, 29, 148, 149, 156, 157, 22, 23, 30, 31, 150, 151, 158, 159, 32, 33, 40, 41, 160, 161, 168, 169, 34, 35, 42, 43, 162, 163, 170, 171, 36, 37, 44, 45, 164, 165, 172, 173, 38, 39, 46, 47, 166, 167, 174, 175, 48, 49, 56, 57, 176, 177, 184, 185, 50, 51, 58, 59, 178, 179, 186, 187, 52, 53, 60, 61, 180, 181, 188, 189, 54, 55, 62, 63, 182, 183, 190, 191, 64, 65, 72, 73, 192, 193, 200, 201, 66, 67, 74, 75, 194, 195, 202, 203, 68, 69, 76, 77, 196, 197, 204, 205, 70, 71, 78, 79, 198, 199, 206, 207, 80, 81, 88, 89, 208, 209, 216, 217, 82, 83, 90, 91, 210, 211, 218, 219, 84, 85, 92, 93, 212, 213, 220, 221, 86, 87, 94, 95, 214, 215, 222, 223, 96, 97, 104, 105, 224, 225, 232, 233, 98, 99, 106, 107, 226, 227, 234, 235, 100, 101, 108, 109, 228, 229, 236, 237, 102, 103, 110, 111, 230, 231, 238, 239, 112, 113, 120, 121, 240, 241, 248, 249, 114, 115, 122, 123, 242, 243, 250, 251, 116, 117, 124, 125, 244, 245, 252, 253, 118, 119, 126, 127, 246, 247, 254, 255]>} {}
// CHECK: error: #vyre.accumulator: the lanes' elements do not cover the matrix once each

// -----

// ... a lane's rows at the same element positions as lane 0's ...
builtin.module attributes {t = #vyre.accumulator<lanes = 32, positions = [0, 1, 8, 9, 128, 129, 136, 137, 130, 131, 138, 139, 2, 3, 10, 11, 4, 5, 12, 13, 132, 133, 140, 141, 6, 7, 14, 15, 134, 135, 142, 143, 16, 17, 24, 25, 144, 145, 152, 153, 18, 19, 26, 27, 146, 147, 154, 155, 20, 21, 28, 29, 148, 149, 156, 157, 22, 23, 30, 31, 150, 151, 158, 159, 32, 33, 40, 41, 160, 161, 168, 169, 34, 35, 42, 43, 162, 163, 170, 171, 36, 37, 44, 45, 164, 165, 172, 173, 38, 39, 46, 47, 166, 167, 174, 175, 48, 49, 56, 57, 176, 177, 184, 185, 50, 51, 58, 59, 178, 179, 186, 187, 52, 53, 60, 61, 180, 181, 188, 189, 54, 55, 62, 63, 182, 183, 190, 191, 64, 65, 72, 73, 192, 193, 200, 201, 66, 67, 74, 75, 194, 195, 202, 203, 68, 69, 76, 77, 196, 197, 204, 205, 70, 71, 78, 79, 198, 199, 206, 207, 80, 81, 88, 89, 208, 209, 216, 217, 82, 83, 90, 91, 210, 211, 218, 219, 84, 85, 92, 93, 212, 213, 220, 221, 86, 87, 94, 95, 214, 215, 222, 223, 96, 97, 104, 105, 224, 225, 232, 233, 98, 99, 106, 107, 226, 227, 234, 235, 100, 101, 108, 109, 228, 229, 236, 237, 102, 103, 110, 111, 230, 231, 238, 239, 112, 113, 120, 121, 240, 241, 248, 249, 114, 115, 122, 123, 242, 243, 250, 251, 116, 117, 124, 125, 244, 245, 252, 253, 118, 119, 126, 127, 246, 247, 254, 255]>} {}
// CHECK: error: #vyre.accumulator: lane 1 keeps its rows' elements at other positions than lane 0

// -----

// ... the lanes that share rows partners under xor (lanes 0 and 3 are not) ...
builtin.module attributes {t = #vyre.accumulator<lanes = 4, positions = [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23, 32, 33, 34, 35, 36, 37, 38, 39, 48, 49, 50, 51, 52, 53, 54, 55, 64, 65, 66, 67, 68, 69, 70, 71, 80, 81, 82, 83, 84, 85, 86, 87, 96, 97, 98, 99, 100, 101, 102, 103, 112, 113, 114, 115, 116, 117, 118, 119, 128, 129, 130, 131, 132, 133, 134, 135, 144, 145, 146, 147, 148, 149, 150, 151, 160, 161, 162, 163, 164, 165, 166, 167, 176, 177, 178, 179, 180, 181, 182, 183, 192, 193, 194, 195, 196, 197, 198, 199, 208, 209, 210, 211, 212, 213, 214, 215, 224, 225, 226, 227, 228, 229, 230, 231, 240, 241, 242, 243, 244, 245, 246, 247, 136, 137, 138, 139, 140, 141, 142, 143, 152, 153, 154, 155, 156, 157, 158, 159, 168, 169, 170, 171, 172, 173, 174, 175, 184, 185, 186, 187, 188, 189, 190, 191, 200, 201, 202, 203, 204, 205, 206, 207, 216, 217, 218, 219, 220, 221, 222, 223, 232, 233, 234, 235, 236, 237, 238, 239, 248, 249, 250, 251, 252, 253, 254, 255, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31, 40, 41, 42, 43, 44, 45, 46, 47, 56, 57, 58, 59, 60, 61, 62, 63, 72, 73, 74, 75, 76, 77, 78, 79, 88, 89, 90, 91, 92, 93, 94, 95, 104, 105, 106, 107, 108, 109, 110, 111, 120, 121, 122, 123, 124, 125, 126, 127]>} {}
// CHECK: error: #vyre.accumulator: the lanes that hold lane 0's rows are not its partners under xor

// -----

// ... a whole share for each lane ...
builtin.module attributes {t = #vyre.accumulator<lanes = 3, positions = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255]>} {}
// CHECK: error: #vyre.accumulator: 256 positions are not a whole share for each of 3 lanes

// -----

// ... an A operand order that names each of a lane's elements once ...
builtin.module attributes {t = #vyre.accumulator<lanes = 32, positions = [0, 1, 8, 9, 128, 129, 136, 137, 2, 3, 10, 11, 130, 131, 138, 139, 4, 5, 12, 13, 132, 133, 140, 141, 6, 7, 14, 15, 134, 135, 142, 143, 16, 17, 24, 25, 144, 145, 152, 153, 18, 19, 26, 27, 146, 147, 154, 155, 20, 21, 28, 29, 148, 149, 156, 157, 22, 23, 30, 31, 150, 151, 158, 159, 32, 33, 40, 41, 160, 161, 168, 169, 34, 35, 42, 43, 162, 163, 170, 171, 36, 37, 44, 45, 164, 165, 172, 173, 38, 39, 46, 47, 166, 167, 174, 175, 48, 49, 56, 57, 176, 177, 184, 185, 50, 51, 58, 59, 178, 179, 186, 187, 52, 53, 60, 61, 180, 181, 188, 189, 54, 55, 62, 63, 182, 183, 190, 191, 64, 65, 72, 73, 192, 193, 200, 201, 66, 67, 74, 75, 194, 195, 202, 203, 68, 69, 76, 77, 196, 197, 204, 205, 70, 71, 78, 79, 198, 199, 206, 207, 80, 81, 88, 89, 208, 209, 216, 217, 82, 83, 90, 91, 210, 211, 218, 219, 84, 85, 92, 93, 212, 213, 220, 221, 86, 87, 94, 95, 214, 215, 222, 223, 96, 97, 104, 105, 224, 225, 232, 233, 98, 99, 106, 107, 226, 227, 234, 235, 100, 101, 108, 109, 228, 229, 236, 237, 102, 103, 110, 111, 230, 231, 238, 239, 112, 113, 120, 121, 240, 241, 248, 249, 114, 115, 122, 123, 242, 243, 250, 251, 116, 117, 124, 125, 244, 245, 252, 253, 118, 119, 126, 127, 246, 247, 254, 255], operand_a = [0, 1, 4, 5, 2, 3, 6, 6]>} {}
// CHECK: error: #vyre.accumulator: operand_a [0, 1, 4, 5, 2, 3, 6, 6] does not name each of a lane's 8 elements once

// -----

// ... and a position for each element (a billion lanes of nothing is refused
// before any table is built).
builtin.module attributes {t = #vyre.accumulator<lanes = 1000000000, positions = []>} {}
// CHECK: error: #vyre.accumulator: 0 positions; a 16x16 accumulator has 256, one for each of its elements
