"""What the SPIR-V emitter hands a runtime: the binary and, per entry point,
what the emitter knew while writing it, so that no runtime parses the
binary to find out."""

from __future__ import annotations

from dataclasses import dataclass

from vyre_xdsl.errors import VyreError


@dataclass(frozen=True)
class EntryPoint:
    """One kernel of the module (a GLCompute entry point named after it)."""

    name: str
    workgroup_size: tuple[int, int, int]
    # bytes of the Workgroup-storage variables this kernel declares (every
    # element is one 32-bit word, a bool included)
    workgroup_bytes: int
    # spec.Capability numbers and extension names the kernel needs, the
    # module-wide ones (Shader, float controls) included
    capabilities: frozenset[int]
    extensions: frozenset[str]


@dataclass(frozen=True)
class SpirvModule:
    binary: bytes
    entries: tuple[EntryPoint, ...]  # in module order

    def entry(self, name: str) -> EntryPoint:
        for entry in self.entries:
            if entry.name == name:
                return entry
        names = ", ".join(e.name for e in self.entries) or "none"
        raise VyreError(
            f"the SPIR-V module has no entry point {name!r} (it has {names}); "
            f"emit it from the same module with emit_spirv_module"
        )

    @property
    def capabilities(self) -> frozenset[int]:
        """Every capability the module declares."""
        return frozenset().union(*(e.capabilities for e in self.entries))
