"""`vx.compile`: a kernel lowered and made ready once, called many times.

    kernel = vx.compile(m, backend="vulkan")        # lowers, emits SPIR-V, makes pipelines
    out = kernel(q=q, k=k, v=v)["out"]              # a dict of new numpy arrays
    k_dev = kernel.upload("k", k)                   # resident on the device
    out = kernel(q=q, k=k_dev, v=v_dev)["out"]      # k and v are not copied again
    k_dev.write(new_rows, offset=row * head_dim)    # update part of it in place
    kernel.close()                                  # or `with vx.compile(...) as kernel:`

`vx.run` is `vx.compile` and one call. On Vulkan a kernel keeps its shader
module, pipelines, descriptor set, command buffer, fence and the buffers of
its outputs and temporaries across calls (vulkan/dispatch.py); the buffer
of an input is made on the first call that passes it as an array. On the
interpreter it keeps the lowered module and the resident arrays.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from vyre_xdsl.errors import VyreError
from vyre_xdsl.compiler import Compiled, compile_module, is_vyre_module
from vyre_xdsl.kernel_info import BufferInfo, ProgramInfo
from vyre_xdsl.run import BACKENDS, check_inputs


def compile(
    module: ModuleOp | Compiled,
    backend: str = "interpreter",
    optimize: str = "default",
    device: str | None = None,
    *,
    staging: bool | None = None,
    f32_parts: int = 0,
) -> Kernel:
    """Lower `module` once (vx.lower_to_gpu with `optimize`, `device` and
    `f32_parts`;
    a lowered module, or a vyre_xdsl.compiler.Compiled, is taken as it
    is) and make it ready to run on
    `backend` ("interpreter" or "vulkan", as vx.run). Returns a `Kernel`:
    call it with the input arrays, as many times as needed.

    On Vulkan `device` defaults to the device that runs it ("vulkan") for
    an optimisation level (a pipeline names it in vyre-to-gpu{device=}), the
    device's limits are checked now, and the SPIR-V module and pipelines
    are made now. `staging` (Vulkan) forces (True) or avoids (False)
    device-local buffers with staging copies; by default they are used
    where the device has memory of its own (a discrete GPU)."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise VyreError(
            f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}"
        )
    if staging is not None and not isinstance(staging, bool | np.bool_):
        raise VyreError(f"staging must be True, False or None (the device decides), "
                        f"got {staging!r}")
    if staging is not None and backend != "vulkan":  # was ignored
        raise VyreError(f"staging= applies to backend='vulkan' (device memory); the "
                        f"{backend} keeps arrays on the host, so leave it out")
    from vyre_xdsl.passes.vyre_to_gpu import OPTIMISATION_LEVELS

    # a pass pipeline names its device in its own options (vyre-to-gpu{device=});
    # lowered IR was lowered for one already
    if (device is None and backend == "vulkan" and optimize in OPTIMISATION_LEVELS
            and isinstance(module, ModuleOp) and is_vyre_module(module)):
        from vyre_xdsl.device import LIVE

        device = LIVE
    compiled = compile_module(module, device, optimize, spirv=backend == "vulkan",
                              f32_parts=f32_parts)
    if backend == "interpreter":
        impl = _Interpreter(compiled.lowered, compiled.info)
    else:
        from vyre_xdsl.vulkan.runtime import load

        impl = _Vulkan(load(compiled.spirv, compiled.info, staging=staging),
                       compiled.spirv.binary)
    return Kernel(backend, compiled, impl)


def _one_call_at_a_time(method):
    """`method` under its kernel's lock: a kernel's buffers, descriptor set
    and command buffer serve one call at a time, whichever threads call."""

    @functools.wraps(method)
    def serialised(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return serialised


class _Released:
    """Released (`_release`) at the end of a `with` block, or when
    collected."""

    def _release(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._release()

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:
            pass  # at interpreter exit the device may be gone already

    # a copy would share what it owns, and free it under the original
    _OWNS, _COPY_HINT = "", ""

    def __copy__(self):
        raise VyreError(f"a {type(self).__name__} owns {self._OWNS} and cannot be copied "
                        f"or pickled; {self._COPY_HINT}")

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce_ex__(self, protocol):
        return self.__copy__()


class Kernel(_Released):
    """A compiled kernel (or program of kernels): `kernel(**arrays) -> dict`.

    Inputs are checked as vx.run checks them (every `read` buffer, the
    buffer's dtype, the right number of elements in any shape); each call
    returns a dict of new numpy arrays, one per output buffer, in its
    logical shape. An input may also be a `DeviceArray` from
    `kernel.upload(name, array)`: it stays on the device and is not copied
    again; a captured table (a modifier's numpy array) is uploaded on
    the first call that leaves it out and stays resident. `timings=` (a
    dict) receives what the call cost (see __call__).

    Threads may share a kernel: its calls, uploads and its DeviceArrays'
    reads and writes take turns (each call owns the kernel's buffers until
    it returns), and kernels on one Vulkan device take turns at its queue.
    `close()` (or leaving a `with` block, or garbage collection, or the end
    of the program) frees its device objects and its DeviceArrays."""

    _OWNS = "its pipelines and buffers"
    _COPY_HINT = "compile the module again with vx.compile where another is needed"

    def __init__(self, backend: str, compiled: Compiled, impl):
        self.backend = backend
        self.compiled = compiled
        self.lowered = compiled.lowered  # the gpu-level module it runs
        self.info = compiled.info  # its buffers and kernels (vyre_xdsl.kernel_info)
        self._impl = impl
        self._lock = threading.RLock()
        self._arrays: weakref.WeakSet[DeviceArray] = weakref.WeakSet()
        # device data of DeviceArrays collected while another thread held
        # the lock (freed by the next call, which holds it)
        self._orphans: deque = deque()
        self._inputs = self.info.inputs
        # captured tables (data the IR records): uploaded on the first call
        # that leaves them out, then passed as resident arrays
        self._tables = tuple(b for b in self._inputs if b.captured is not None)
        self._resident_tables: dict[str, DeviceArray] = {}
        # what a call checks and returns, looked up once (_quick_inputs)
        self._expected = {b.name: (b.numpy_dtype, b.count) for b in self._inputs}
        self._shapes = tuple((b.name, b.shape) for b in self.info.outputs)

    # names ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.info.name

    @property
    def inputs(self) -> tuple[str, ...]:
        """The names of its input buffers, in binding order."""
        return tuple(b.name for b in self.info.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.info.outputs)

    @property
    def spirv(self) -> bytes | None:
        """The SPIR-V module it dispatches (Vulkan), else None."""
        return getattr(self._impl, "spirv", None)

    @property
    def closed(self) -> bool:
        """After close(), or vulkan.close() (which closes the device's kernels)."""
        return self._impl is None or getattr(self._impl, "closed", False)

    @_one_call_at_a_time
    def statistics(self) -> dict[str, dict[str, int | float | bool]]:
        """What the device's compiler made of each kernel, by kernel name:
        the driver's own statistics (on NVIDIA, the registers a lane and
        more) where it reports them (VK_KHR_pipeline_executable_properties),
        else {} (the interpreter, lavapipe)."""
        return self._open().statistics()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.backend
        return f"<vx.Kernel {self.info.label} ({state})>"

    # calls ------------------------------------------------------------------
    @_one_call_at_a_time
    def __call__(self, inputs: Mapping[str, object] | None = None, /, *,
                 timings: dict | None = None, **arrays: object) -> dict[str, np.ndarray]:
        """Run on the inputs given as keywords (`kernel(q=q, k=k, v=v)`) or
        as one dict (`kernel({"q": q, ...})`, as vx.run takes them); return
        {output name: new array in its logical shape}.

        `timings`, a dict, receives per call: 'total_ms' (host wall time of
        the call), 'host_ms' (the part the host spent itself: checks,
        copies, recording, submission, read-back; total_ms - wait_ms),
        'wait_ms' (blocked on the device), 'uploaded_bytes' (input bytes
        copied for this call; 0 when every input is resident), and on
        Vulkan, where the queue has timestamps, 'dispatch_ms' (GPU time of
        the kernels), 'kernel_ms' (each kernel's, by name: e.g. where an
        MLA decode program's time goes) and 'device_ms' (of all the call's GPU work, copies
        and zeroed temporaries too), and 'recorded' (whether the command
        buffer was recorded again: the first call, or other resident
        arrays)."""
        start = time.perf_counter()
        impl = self._open()
        if timings is not None and not isinstance(timings, dict):
            raise VyreError(f"timings must be a dict to fill, got {type(timings).__name__}")
        given = _merge(inputs, arrays)
        if self._tables:
            given = self._with_tables(given)
        values, host = self._quick_inputs(given) or self._checked_inputs(given)
        stats = {} if timings is not None else None
        outputs = impl.run(values, host, stats)
        result = {name: outputs[name].reshape(shape) for name, shape in self._shapes}
        if timings is not None:
            total = (time.perf_counter() - start) * 1e3
            impl.gpu_times(stats)  # after the clock: reading them is not the call's
            timings.update(stats)
            timings["total_ms"] = total
            timings["host_ms"] = total - stats.get("wait_ms", 0.0)
        return result

    def _with_tables(self, given: Mapping[str, object]) -> Mapping[str, object]:
        """`given` with each captured table it leaves out as the kernel's
        resident copy (uploaded once): not checked or copied at every call."""
        missing = [b for b in self._tables if b.name not in given]
        for buffer in missing:
            if buffer.name not in self._resident_tables:
                self._resident_tables[buffer.name] = self.upload(
                    buffer.name, buffer.captured_array())
        if not missing:
            return given
        return {**{b.name: self._resident_tables[b.name] for b in missing}, **given}

    def _quick_inputs(self, given: Mapping[str, object]):
        """(what the backend binds for each input, the host arrays among
        them) when every input is as it should be: a numpy array of the
        buffer's dtype and size, or a live DeviceArray of this kernel for
        that input; else None, and _checked_inputs says what is wrong. The
        arrays are not copied (check_inputs copies): no backend writes an
        input, and Vulkan copies them into its own buffers."""
        expected = self._expected
        if len(given) != len(expected):
            return None
        values, host = {}, {}
        for name, (dtype, count) in expected.items():
            value = given.get(name)
            if type(value) is np.ndarray:
                if value.dtype != dtype or value.size != count:
                    return None
                flat = value.reshape(-1)  # a copy where the strides cannot be flattened
                if not flat.flags.c_contiguous:  # a strided view (q of a fused qkv)
                    flat = np.ascontiguousarray(flat)
                values[name] = host[name] = flat
            elif (type(value) is DeviceArray and value._kernel is self
                  and value._data is not None and value.name == name):
                values[name] = value._data
            else:
                return None
        return values, host

    def _checked_inputs(self, given: Mapping[str, object]):
        """As _quick_inputs, for any `given`: check_inputs (and _data_of)
        raise a VyreError naming what is wrong."""
        resident = {name: value for name, value in given.items()
                    if isinstance(value, DeviceArray)}
        host = check_inputs(self.info, given, resident=resident.keys())
        values = {}
        for buffer in self._inputs:
            handle = resident.get(buffer.name)
            values[buffer.name] = (host[buffer.name] if handle is None
                                   else self._data_of(buffer.name, handle))
        return values, host

    # resident arrays --------------------------------------------------------
    @_one_call_at_a_time
    def upload(self, name: str, array: np.ndarray) -> DeviceArray:
        """Copy `array` to the device once, as input `name`, and return a
        DeviceArray to pass as that input in later calls (`kernel(k=k_dev)`)
        instead of the array: it is not copied again. Checked as a call
        checks an input. Free it with `.free()` (the kernel's close() frees
        every one)."""
        impl = self._open()
        _not_on_device(array)
        flat = self._checked(name, array)
        buffer = self.info.buffer(name)
        handle = DeviceArray(self, buffer, flat.dtype, impl.upload(buffer, flat))
        self._arrays.add(handle)
        return handle

    def _checked(self, name: object, array: object) -> np.ndarray:
        """`array` as a flat copy for input `name`, checked as a call checks
        it (the other inputs are not looked at)."""
        if not isinstance(name, str):
            raise VyreError(f"an input's name is a string, one of {', '.join(self.inputs)}; "
                            f"got {name!r}")
        others = {b.name: None for b in self.info.inputs if b.name != name}
        return check_inputs(self.info, {name: array, **others},
                            resident=others.keys())[name]

    def _data_of(self, name: str, handle: DeviceArray):
        """What the backend binds for a DeviceArray passed as input `name`."""
        if handle._kernel is not self:
            raise VyreError(
                f"input {name!r} is {handle!r}, uploaded to another kernel; a "
                f"DeviceArray belongs to the kernel that made it: upload it to this "
                f"one with kernel.upload({name!r}, array)"
            )
        if handle._data is None:
            raise VyreError(
                f"input {name!r} is {handle!r}, which was freed; upload the array "
                f"again with kernel.upload({name!r}, array)"
            )
        if handle.name != name:
            raise VyreError(
                f"input {name!r} is {handle!r}, the device copy of input "
                f"{handle.name!r} ({handle.size} elements, shape {handle.shape}); "
                f"pass it as {handle.name}=, and upload {name!r} with "
                f"kernel.upload({name!r}, array)"
            )
        return handle._data

    # lifetime ---------------------------------------------------------------
    def _open(self):
        impl = self._impl
        if impl is None:
            raise VyreError(
                f"{self.info.label} was closed (kernel.close()); compile it again "
                f"with vx.compile"
            )
        if getattr(impl, "closed", False):
            self._impl = None
            raise VyreError(
                f"{self.info.label} was closed with its Vulkan device "
                f"(vyre_xdsl.vulkan.close()); compile it again with vx.compile"
            )
        while self._orphans:
            impl.free(self._orphans.popleft())
        return impl

    @_one_call_at_a_time
    def close(self) -> None:
        """Free the kernel's device objects and every DeviceArray it made;
        later calls raise a VyreError. Idempotent."""
        impl, self._impl = self._impl, None
        if impl is None:
            return
        self._orphans.clear()  # the backend's close frees every buffer
        for handle in list(self._arrays):
            handle._data = None
        self._arrays.clear()
        impl.close()

    _release = close


class DeviceArray(_Released):
    """An input array kept on the device by the kernel that uploaded it
    (`kernel.upload(name, array)`); pass it as that input instead of the
    array (`kernel(q=q, k=k_dev)`), as often as needed.

    `write(values, offset=0)` overwrites it in place, wholly or from
    element `offset` of the flattened array on (a new row of a KV cache);
    `read()` copies it back; `free()` (or the kernel's close(), or garbage
    collection) releases the device memory."""

    _OWNS = "memory of the kernel that uploaded it"
    _COPY_HINT = "read it into a numpy array (.read()) and upload that"

    def __init__(self, kernel: Kernel, buffer: BufferInfo, dtype: np.dtype, data):
        self._kernel = kernel
        self._lock = kernel._lock
        self._buffer = buffer
        self.dtype = dtype
        self._data = data  # the backend's: a DeviceBuffer (Vulkan), an array (interpreter)

    @property
    def name(self) -> str:
        """The input buffer it is a copy of."""
        return self._buffer.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self._buffer.shape

    @property
    def size(self) -> int:
        return self._buffer.count

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def freed(self) -> bool:
        return self._data is None

    def __repr__(self) -> str:
        state = "freed" if self.freed else self._kernel.backend
        return (f"DeviceArray({self.name!r}, shape={self.shape}, dtype={self.dtype}, "
                f"{state})")

    def _live(self):
        try:
            impl = self._kernel._open()
        except VyreError as error:  # the array went with it
            raise VyreError(f"{self!r} was on a kernel that is closed: {error}, and "
                            f"upload the array to the new kernel") from None
        if self._data is None:
            raise VyreError(f"{self!r} was freed; upload the array again with "
                            f"kernel.upload({self.name!r}, array)")
        return impl

    @_one_call_at_a_time
    def write(self, values: np.ndarray, offset: int = 0) -> None:
        """Overwrite elements offset .. offset + values.size - 1 of the
        flattened array with `values` (any shape, the array's dtype); with
        offset 0 and as many values as the array has, all of it."""
        impl = self._live()
        _not_on_device(values)
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise VyreError(f"offset must be an element index (int), got {offset!r}")
        offset = int(offset)
        if offset == 0 and getattr(values, "size", None) == self.size:
            flat = self._kernel._checked(self.name, values)
        else:
            flat = self._part(values, offset)
        impl.write(self._data, flat, offset)

    def _part(self, values: object, offset: int) -> np.ndarray:
        if not isinstance(values, np.ndarray) or isinstance(values, np.ma.MaskedArray):
            raise VyreError(
                f"values for {self.name!r} must be a numpy array of {self.dtype}, got "
                f"{type(values).__name__}"
            )
        if values.dtype != self.dtype:
            raise VyreError(
                f"values for {self.name!r} have dtype {values.dtype}, the array holds "
                f"{self.dtype}; convert them with .astype(...)"
            )
        if offset < 0 or offset + values.size > self.size:
            raise VyreError(
                f"cannot write {values.size} elements at offset {offset} of "
                f"{self.name!r}, which has {self.size} (shape {self.shape}); the "
                f"offset counts elements of the flattened array"
            )
        return np.ascontiguousarray(values).reshape(-1)

    @_one_call_at_a_time
    def read(self) -> np.ndarray:
        """A new numpy array with what the device holds, in the buffer's shape."""
        impl = self._live()
        return impl.read(self._data).reshape(self.shape)

    @_one_call_at_a_time
    def free(self) -> None:
        """Release the device memory now (idempotent)."""
        data, self._data = self._data, None
        if data is None:
            return
        self._kernel._arrays.discard(self)
        impl = self._kernel._impl
        if impl is not None:
            impl.free(data)

    def _release(self) -> None:
        """free(), without waiting: collected while another thread holds the
        kernel (a finaliser that waited could deadlock), its data is left
        for the kernel's next call to free."""
        if not self._lock.acquire(blocking=False):
            data, self._data = self._data, None
            if data is not None:
                self._kernel._orphans.append(data)
            return
        try:
            self.free()
        finally:
            self._lock.release()


def _not_on_device(values: object) -> None:
    """A DeviceArray where host values are wanted (an upload, a write)."""
    if isinstance(values, DeviceArray):
        raise VyreError(
            f"{values!r} is on the device already: pass it to a call as input "
            f"{values.name!r}, or read it back (.read()) to upload or write its values"
        )


def _merge(inputs: object, arrays: dict[str, object]) -> Mapping[str, object]:
    if inputs is None:
        return arrays
    if not isinstance(inputs, Mapping):
        raise VyreError(
            f"inputs must be a dict of buffer name -> numpy array, got "
            f"{type(inputs).__name__}"
        )
    twice = [name for name in arrays if name in inputs]
    if twice:
        raise VyreError(f"input {twice[0]!r} is given twice, in the dict and as a keyword")
    return {**inputs, **arrays} if arrays else inputs


# backends -------------------------------------------------------------------------

class _Interpreter:
    """The xDSL interpreter: resident arrays are flat host copies."""

    def __init__(self, lowered: ModuleOp, info: ProgramInfo):
        from vyre_xdsl.interp.execute import check_launch, check_supported

        for kernel in info.kernels:  # refuse what it cannot run now, not at a call
            check_supported(kernel.func)
            check_launch(kernel)
        self.lowered, self.info = lowered, info

    def run(self, values, host, stats):
        from vyre_xdsl.interp import execute

        arrays = dict(values)
        for buffer in self.info.outputs:  # temporaries: execute zeroes its own
            arrays[buffer.name] = np.zeros(buffer.count, buffer.numpy_dtype)
        execute(self.lowered, self.info, arrays)
        if stats is not None:
            stats["uploaded_bytes"] = sum(array.nbytes for array in host.values())
        return {b.name: arrays[b.name] for b in self.info.outputs}

    def gpu_times(self, stats: dict) -> None:
        pass

    def statistics(self) -> dict:
        return {}

    def upload(self, buffer: BufferInfo, flat: np.ndarray) -> np.ndarray:
        return flat  # already a copy of the caller's array

    def write(self, data: np.ndarray, flat: np.ndarray, offset: int) -> None:
        data[offset:offset + flat.size] = flat

    def read(self, data: np.ndarray) -> np.ndarray:
        return data.copy()

    def free(self, data) -> None:
        pass

    def close(self) -> None:
        pass


class _Vulkan:
    """A vulkan.dispatch.Dispatcher; resident arrays are its DeviceBuffers.
    `spirv`: the program's module (its pipelines may be built from each
    kernel's module alone, SpirvModule.binaries)."""

    def __init__(self, dispatcher, spirv: bytes):
        self.dispatcher, self.spirv = dispatcher, spirv

    @property
    def closed(self) -> bool:
        return self.dispatcher.closed

    def run(self, values, host, stats):
        dispatcher = self.dispatcher
        outputs = dispatcher.run(values, stats)
        ctx = dispatcher.ctx
        if ctx.messages:  # the message is worded only when there is one
            from vyre_xdsl.vulkan.device import _check

            _check(ctx.messages, f"the run of {dispatcher.program.label} on {ctx.name}")
        return outputs

    def gpu_times(self, stats):
        self.dispatcher.gpu_times(stats)

    def statistics(self):
        return self.dispatcher.statistics()

    def upload(self, buffer, flat):
        return self.dispatcher.upload(buffer, flat)

    def write(self, data, flat, offset):
        self.dispatcher.write(data, flat, offset)

    def read(self, data):
        return self.dispatcher.read(data)

    def free(self, data):
        self.dispatcher.free(data)

    def close(self):
        self.dispatcher.close()
