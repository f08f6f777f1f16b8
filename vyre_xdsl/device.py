"""Device profiles: the limits and capabilities a kernel is tuned against.

`optimize="default"` must never produce a kernel that its device refuses, so
the tuning reads the limits from a profile instead of assuming one GPU:

    generic    the minimums every Vulkan 1.1 compute device guarantees; the
               choice when lowering without a device (vx.lower_to_gpu,
               vx.compile_spirv, vyre-opt, the interpreter)
    h200       an NVIDIA H200 with driver 580
    lavapipe   Mesa's CPU driver (Debian 12)
    vulkan     the Vulkan device that vx.run(backend="vulkan") would use,
               read from the driver (VYRE_VULKAN_DEVICE picks it)

A profile is data: adding a device is adding an entry to PROFILES.  The
tuning (vyre_xdsl.tuning) reads it; docs/performance.md says how.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.dialects.builtin import BFloat16Type, Float16Type
from xdsl.ir import Attribute

from vyre_xdsl.errors import VyreError
from vyre_xdsl.mma_layout import TILE, AccumulatorLayout


@dataclass(frozen=True)
class DeviceProfile:
    """What the tuning may rely on (Vulkan's names in the comments)."""

    name: str
    shared_memory_bytes: int  # maxComputeSharedMemorySize
    max_workgroup_invocations: int  # maxComputeWorkGroupInvocations
    # subgroupSize where compute shaders may shuffle within a subgroup
    # (VK_SUBGROUP_FEATURE_SHUFFLE and _RELATIVE); 0: no shuffles
    shuffle_subgroup_size: int
    max_buffer_bytes: int  # maxStorageBufferRange
    # the VkSubgroupFeatureFlagBits (of those vyre's kernels use: BASIC,
    # SHUFFLE, SHUFFLE_RELATIVE) supported in compute shaders
    subgroup_operations: frozenset[str] = frozenset()
    # (M, N, K) of the VK_KHR_cooperative_matrix shapes with f16 inputs and
    # f32 results, subgroup scope
    cooperative_matrix_shapes: tuple[tuple[int, int, int], ...] = ()
    # the same with bf16 inputs (VK_KHR_shader_bfloat16's
    # shaderBFloat16CooperativeMatrix), whose A operands hold a lane's
    # elements as the f16 ones do
    bfloat16_matrix_shapes: tuple[tuple[int, int, int], ...] = ()
    # which lane holds which element of a 16x16 f32 (and f16) accumulator
    # (vyre_xdsl.mma_layout; None: unknown, no kernel computes on them)
    accumulator_layout: AccumulatorLayout | None = None
    # f16 and bf16 buffers (storageBuffer16BitAccess; arithmetic stays f32)
    float16: bool = False
    bfloat16: bool = False

    def matrix_shapes(self, element: Attribute) -> tuple[tuple[int, int, int], ...]:
        """The cooperative-matrix shapes with `element` inputs."""
        if isinstance(element, Float16Type):
            return self.cooperative_matrix_shapes
        if isinstance(element, BFloat16Type):
            return self.bfloat16_matrix_shapes
        return ()

    def without_matrices(self) -> DeviceProfile:
        """This profile with no cooperative matrices: a plan for it keeps
        every kernel on the lanes (f32 products, the weights never rounded
        to 16 bits) where the device would have matrix units."""
        return replace(self, cooperative_matrix_shapes=(), bfloat16_matrix_shapes=(),
                       accumulator_layout=None)

    @property
    def max_dim_parts(self) -> int:
        """How many lanes may share a row (vyre-split-head-dim adds a row's
        parts with shuffles within a subgroup)."""
        return max(1, self.shuffle_subgroup_size)


def mma_sync_layout(lanes: int = 32) -> AccumulatorLayout:
    """The accumulator layout of NVIDIA's tensor cores: a 16x16 tile as two
    16x8 tiles of PTX's mma.m16n8k16 (PTX ISA, "Matrix Fragments for
    mma.m16n8k16": lane l holds rows l/4 and l/4 + 8, columns 2 (l % 4) and
    the next), the first tile's four elements, then the second's; an f16
    A operand holds the same elements in the same order.  Both read from
    the H200's driver by the layout kernels (tools/gpu_check.py's `layout`
    case checks them there)."""
    def position(lane: int, i: int) -> int:
        row = lane // 4 + (i // 4) * (TILE // 2)
        col = 2 * (lane % 4) + i % 2 + ((i // 2) % 2) * (TILE // 2)
        return row * TILE + col

    share = TILE * TILE // lanes
    positions = [position(lane, i) for lane in range(lanes) for i in range(share)]
    return AccumulatorLayout.from_positions(positions, lanes).with_operand(positions)


_SHUFFLES = frozenset({"BASIC", "SHUFFLE", "SHUFFLE_RELATIVE"})
GENERIC = DeviceProfile("generic", 16384, 128, 0, 2**27)
H200 = DeviceProfile("h200", 49152, 1024, 32, 2**32 - 1, _SHUFFLES,
                     cooperative_matrix_shapes=((16, 16, 16), (16, 8, 16), (16, 8, 8)),
                     bfloat16_matrix_shapes=((16, 16, 16),),
                     accumulator_layout=mma_sync_layout(), float16=True, bfloat16=True)
LAVAPIPE = DeviceProfile(
    "lavapipe", 32768, 1024, 8, 2**27, _SHUFFLES, float16=True, bfloat16=True
)

PROFILES = {p.name: p for p in (GENERIC, H200, LAVAPIPE)}
LIVE = "vulkan"
DEVICE_NAMES = (*PROFILES, LIVE)


def device_profile(device: str | DeviceProfile = GENERIC.name) -> DeviceProfile:
    """The profile named `device` (one of DEVICE_NAMES), or `device` itself."""
    if isinstance(device, DeviceProfile):
        return device
    if isinstance(device, str) and device == LIVE:  # not an array's ==
        from vyre_xdsl.vulkan.runtime import live_profile

        return live_profile()
    if not isinstance(device, str) or device not in PROFILES:
        raise VyreError(
            f"unknown device {device!r}; choose one of {', '.join(DEVICE_NAMES)} "
            f"('{LIVE}' reads the Vulkan device that runs the kernel)"
        )
    return PROFILES[device]
