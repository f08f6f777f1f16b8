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
    # a program's kernels each in a module of its own, in module order
    # (empty for one kernel): SPIR-V 1.3's entry points do not list the
    # Workgroup variables they use, so a driver may size an entry point's
    # workgroup memory by every one of its module's
    alone: tuple[bytes, ...] = ()

    def binaries(self) -> tuple[bytes, ...]:
        """A binary for each entry point, in order, to build its pipeline from."""
        return self.alone or (self.binary,) * len(self.entries)

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
