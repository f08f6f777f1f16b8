"""Small hand-written lowered kernels (docs/lowered-ir.md form) used by the
SPIR-V and Vulkan tests and as examples of what the emitter accepts."""

from __future__ import annotations


def lowered_kernel(name: str, buffers: list[tuple[str, str, int]], body: str,
                   item_count: int, workgroup: int = 64) -> str:
    """Wrap `body` (ops using %item, %lane and the buffer names) into a
    lowered module. `buffers`: (name, access, element count)."""
    types = ", ".join(f"memref<{n}xf32>" for _, _, n in buffers)
    args = ", ".join(f"%{name}: memref<{n}xf32>" for name, _, n in buffers)
    entries = ",\n          ".join(
        f'#vyre.buffer<name = "{name}", binding = {i}, access = {access}, '
        f"shape = [{n}], dtype = f32>"
        for i, (name, access, n) in enumerate(buffers)
    )
    grid = (item_count + workgroup - 1) // workgroup
    return f"""builtin.module attributes {{gpu.container_module}} {{
  "gpu.module"() <{{sym_name = "{name}"}}> ({{
    "gpu.func"() <{{function_type = ({types}) -> (), kernel}}> ({{
    ^bb0({args}):
      %item = "gpu.global_id"() <{{dimension = #gpu<dim x>}}> : () -> index
      %lane = "gpu.thread_id"() <{{dimension = #gpu<dim x>}}> : () -> index
{body}
      "gpu.return"() : () -> ()
    }}) {{sym_name = "{name}", gpu.kernel, vyre.launch = #vyre.launch<items = {item_count},
        workgroup = [{workgroup}, 1, 1], grid = [{grid}, 1, 1],
        buffers = [
          {entries}]>}} : () -> ()
  }}) : () -> ()
}}
"""


# lane i reads what lane (i+1) % 64 wrote to workgroup memory
BARRIER_EXCHANGE = lowered_kernel("exchange", [("a", "read", 128), ("out", "write", 128)], """
      %tile = memref.alloc() : memref<64xf32, 3 : i64>
      %x = memref.load %a[%item] : memref<128xf32>
      memref.store %x, %tile[%lane] : memref<64xf32, 3 : i64>
      "gpu.barrier"() : () -> ()
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %next = arith.addi %lane, %c1 : index
      %wrapped = arith.remui %next, %c64 : index
      %y = memref.load %tile[%wrapped] : memref<64xf32, 3 : i64>
      memref.store %y, %out[%item] : memref<128xf32>
""", item_count=128)

# out[i*16 + p] = (a[i] PRED b[i]) for 16 float predicates, 1.0 / 0.0
CMPF_PREDICATES = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
                   "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true"]


def _cmpf_body() -> str:
    lines = [
        "      %c16 = arith.constant 16 : index",
        "      %one = arith.constant 1.0 : f32",
        "      %zero = arith.constant 0.0 : f32",
        "      %x = memref.load %a[%item] : memref<64xf32>",
        "      %y = memref.load %b[%item] : memref<64xf32>",
        "      %base = arith.muli %item, %c16 : index",
    ]
    for i, pred in enumerate(CMPF_PREDICATES):
        lines += [
            f"      %p{i} = arith.cmpf {pred}, %x, %y : f32",
            f"      %v{i} = arith.select %p{i}, %one, %zero : f32",
            f"      %k{i} = arith.constant {i} : index",
            f"      %i{i} = arith.addi %base, %k{i} : index",
            f"      memref.store %v{i}, %out[%i{i}] : memref<1024xf32>",
        ]
    return "\n".join(lines)


CMPF = lowered_kernel("cmpf", [("a", "read", 64), ("b", "read", 64),
                               ("out", "write", 1024)], _cmpf_body(), item_count=64)

# out[i*4 + 0..3] = maximumf, minimumf, exp, (x > 0 ? sqrt(x) : -x) via scf.if results
MISC = lowered_kernel("misc", [("a", "read", 64), ("b", "read", 64),
                               ("out", "write", 256)], """
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %n = arith.constant 64 : index
      %in = arith.cmpi ult, %item, %n : index
      scf.if %in {
        %x = memref.load %a[%item] : memref<64xf32>
        %y = memref.load %b[%item] : memref<64xf32>
        %base = arith.muli %item, %c4 : index
        %mx = arith.maximumf %x, %y : f32
        memref.store %mx, %out[%base] : memref<256xf32>
        %mn = arith.minimumf %x, %y : f32
        %i1 = arith.addi %base, %c1 : index
        memref.store %mn, %out[%i1] : memref<256xf32>
        %e = math.exp %x : f32
        %i2 = arith.addi %base, %c2 : index
        memref.store %e, %out[%i2] : memref<256xf32>
        %zero = arith.constant 0.0 : f32
        %pos = arith.cmpf ogt, %x, %zero : f32
        %r = scf.if %pos -> (f32) {
          %s = math.sqrt %x : f32
          scf.yield %s : f32
        } else {
          %ng = arith.negf %x : f32
          scf.yield %ng : f32
        }
        %i3 = arith.addi %base, %c3 : index
        memref.store %r, %out[%i3] : memref<256xf32>
      }
""", item_count=64)

# out[i] = sum_{r < i % 5} sum_{c < 3} (a[i] * r + c), integer-valued f32
NESTED_LOOPS = lowered_kernel("nested", [("a", "read", 100), ("out", "write", 100)], """
      %n = arith.constant 100 : index
      %in = arith.cmpi ult, %item, %n : index
      scf.if %in {
        %c0 = arith.constant 0 : index
        %c1 = arith.constant 1 : index
        %c3 = arith.constant 3 : index
        %c5 = arith.constant 5 : index
        %rows = arith.remui %item, %c5 : index
        %x = memref.load %a[%item] : memref<100xf32>
        %z = arith.constant 0.0 : f32
        %total, %count = scf.for %r = %c0 to %rows step %c1 iter_args(%acc = %z, %k = %c0) -> (f32, index) {
          %ri = arith.index_cast %r : index to i32
          %rf = arith.sitofp %ri : i32 to f32
          %inner = scf.for %c = %c0 to %c3 step %c1 iter_args(%acc2 = %acc) -> (f32) {
            %ci = arith.index_cast %c : index to i32
            %cf = arith.uitofp %ci : i32 to f32
            %xr = arith.mulf %x, %rf : f32
            %t = arith.addf %xr, %cf : f32
            %acc3 = arith.addf %acc2, %t : f32
            scf.yield %acc3 : f32
          }
          %k2 = arith.addi %k, %c1 : index
          scf.yield %inner, %k2 : f32, index
        }
        %ki = arith.index_cast %count : index to i32
        %kf = arith.sitofp %ki : i32 to f32
        %res = arith.addf %total, %kf : f32
        memref.store %res, %out[%item] : memref<100xf32>
      }
""", item_count=100)

UNSUPPORTED = lowered_kernel("bad", [("a", "read", 64), ("out", "write", 64)], """
      %x = memref.load %a[%item] : memref<64xf32>
      %y = math.atan %x : f32
      memref.store %y, %out[%item] : memref<64xf32>
""", item_count=64)
