"""The one device abstraction: CPU, CUDA and Ascend NPU (``torch_npu``) differ only in this file.

Simplifications: one device per process (an index picks it); allocator statistics are the
caching allocator's current/peak counters (CUDA and NPU expose the same functions); the CPU has
no allocator statistics (``None``, never zero) and is measured by the process's resident set.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import resource
import sys
from dataclasses import dataclass
from types import ModuleType

import torch

KINDS = ("cpu", "cuda", "npu")
"""Device kinds a :class:`Device` can be; ``auto`` resolves to one of them."""

_SPEC = re.compile(r"^(cpu|cuda|npu|auto)(?::(\d+))?$")
_NPU_INSTALL_HINT = (
    "device 'npu' needs the torch_npu package, which is not installed; "
    "install it with `pip install closedloop[npu]` (Ascend CANN toolkit required)"
)


@dataclass(frozen=True)
class AllocatorStats:
    """The device caching allocator's counters at one instant, in bytes."""

    allocated: int
    """Bytes held by live tensors (``memory_allocated``)."""
    reserved: int
    """Bytes the caching allocator holds from the driver (``memory_reserved``)."""
    max_allocated: int
    """Peak of ``allocated`` since the last :meth:`Device.reset_peak_stats`."""

    @property
    def cached_free(self) -> int:
        """Reserved but not allocated: the ``allocator`` memory category."""
        return self.reserved - self.allocated


def _import_torch_npu() -> ModuleType:
    """Import ``torch_npu`` (registers ``torch.npu``) or raise a RuntimeError saying how to get it."""
    try:
        return importlib.import_module("torch_npu")
    except ImportError as err:
        raise RuntimeError(_NPU_INSTALL_HINT) from err


def _npu_available() -> bool:
    """True when ``torch_npu`` imports and sees at least one NPU."""
    try:
        _import_torch_npu()
    except RuntimeError:
        return False
    return bool(torch.npu.is_available())  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Device:
    """One compute device. Build it with :meth:`from_string` (``cpu|cuda|npu|auto[:index]``)."""

    kind: str
    """``cpu``, ``cuda`` or ``npu``."""
    index: int = 0
    """Device ordinal for ``cuda``/``npu``; always 0 for ``cpu``."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Device.kind must be one of {KINDS}, got {self.kind!r}")
        if self.index < 0:
            raise ValueError(f"Device.index must be >= 0, got {self.index}")
        if self.kind == "cpu" and self.index != 0:
            raise ValueError(f"Device.index must be 0 for cpu, got {self.index}")
        if self.kind == "npu":
            _import_torch_npu()

    @classmethod
    def from_string(cls, spec: str) -> Device:
        """Parse ``cpu``, ``cuda[:i]``, ``npu[:i]`` or ``auto`` (cuda, else npu, else cpu)."""
        match = _SPEC.match(spec.strip().lower()) if isinstance(spec, str) else None
        if match is None:
            raise ValueError(
                f"device must be one of cpu|cuda|npu|auto (optionally ':index'), got {spec!r}"
            )
        kind, index = match.group(1), int(match.group(2) or 0)
        if kind == "auto":
            if torch.cuda.is_available():
                kind = "cuda"
            elif _npu_available():
                kind = "npu"
            else:
                kind, index = "cpu", 0
        if kind == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
        return cls(kind=kind, index=index)

    @property
    def torch_device(self) -> torch.device:
        """The ``torch.device`` (``cpu``, ``cuda:i`` or ``npu:i``)."""
        if self.kind == "cpu":
            return torch.device("cpu")
        return torch.device(self.kind, self.index)

    @property
    def name(self) -> str:
        """``str(torch_device)``: how tensors on this device spell their ``.device``."""
        return str(self.torch_device)

    def _backend(self) -> ModuleType | None:
        """``torch.cuda`` / ``torch.npu``, or None on the CPU."""
        if self.kind == "cuda":
            return torch.cuda
        if self.kind == "npu":
            return torch.npu  # type: ignore[attr-defined]
        return None

    def synchronize(self) -> None:
        """Wait for all queued work on the device (no-op on the CPU)."""
        backend = self._backend()
        if backend is not None:
            backend.synchronize(self.torch_device)

    def allocator_stats(self) -> AllocatorStats | None:
        """The caching allocator's counters (host-side reads, no device sync); None on the CPU."""
        backend = self._backend()
        if backend is None:
            return None
        dev = self.torch_device
        return AllocatorStats(
            allocated=int(backend.memory_allocated(dev)),
            reserved=int(backend.memory_reserved(dev)),
            max_allocated=int(backend.max_memory_allocated(dev)),
        )

    def reset_peak_stats(self) -> None:
        """Reset ``max_allocated`` to the current allocation (no-op on the CPU)."""
        backend = self._backend()
        if backend is not None:
            backend.reset_peak_memory_stats(self.torch_device)

    def supports_autocast(self, dtype: torch.dtype) -> bool:
        """Whether :meth:`autocast` can run in ``dtype`` here (bf16/fp16 only; fp32 means off)."""
        if dtype == torch.float32:
            return True
        if dtype not in (torch.bfloat16, torch.float16):
            return False
        if self.kind == "cuda":
            return dtype == torch.float16 or bool(torch.cuda.is_bf16_supported())
        return True  # CPU autocast (torch >= 2.3) and NPU autocast take both

    def autocast(self, dtype: torch.dtype) -> contextlib.AbstractContextManager:
        """``torch.autocast`` for this device; ``dtype=float32`` returns a no-op context."""
        if not self.supports_autocast(dtype):
            raise ValueError(f"autocast dtype {dtype} is not supported on {self.name}")
        if dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.kind, dtype=dtype)

    def manual_seed(self, seed: int) -> None:
        """Seed the CPU generator and this device's generators."""
        torch.manual_seed(seed)  # also seeds every CUDA device
        backend = self._backend()
        if backend is not None:
            backend.manual_seed_all(seed)


def process_rss_bytes() -> int | None:
    """This process's resident set size in bytes (``/proc/self/statm``); None if unreadable.

    Without ``/proc`` (macOS) it falls back to ``ru_maxrss``, which is the *peak* RSS.
    """
    try:
        with open("/proc/self/statm", "rb") as fh:
            resident_pages = int(fh.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    return int(maxrss) if sys.platform == "darwin" else int(maxrss) * 1024
