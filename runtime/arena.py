"""The memory arena: plan layouts per bound shape, and a pool of arenas by size.

A :class:`ArenaPlan` holds the symbolic plan of ``kiln-plan-memory``
(offsets, sizes, the arena size) compiled to closures.  Its
:meth:`~ArenaPlan.layout` evaluates them once per bound shape and caches the
result, so a repeated shape costs one dict lookup.  An :class:`ArenaPool`
hands out arenas (flat ``uint8`` torch tensors) keyed by their exact size and
takes them back after the call, so a model allocates one arena per
*concurrent call shape*, not one buffer per tensor.  Arenas are per call: two
threads never share one, which is what makes a model safe to call from
several threads at once.

Views into an arena (made by :class:`~kiln.runtime.executor.Executor`) are
torch tensors sharing its memory; ``.numpy()`` on them is free as well.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..errors import KilnError
from .contract import compile_expr

__all__ = ["ArenaLayout", "ArenaPlan", "ArenaPool", "torch_dtype"]

_TORCH_DTYPES = {
    "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
    "i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
}


def torch_dtype(name) -> torch.dtype:
    """The torch dtype of a kiln dtype name (``"f32"``) or MLIR type."""
    try:
        return _TORCH_DTYPES[str(name)]
    except KeyError:
        raise KilnError(f"no torch dtype for '{name}'") from None


@dataclass(frozen=True)
class ArenaLayout:
    """A plan evaluated at one shape: bytes, and ``(offset, nbytes)`` per value id."""

    arena_bytes: int
    no_reuse_bytes: int
    offsets: Mapping[int, tuple[int, int]]


class ArenaPlan:
    """A memory plan compiled for evaluation (see the module docstring).

    ``buffers`` maps value ids to ``{"offset": text, "size": text}``;
    ``arena_size``/``no_reuse_size`` are expression texts as
    ``kiln-plan-memory`` prints them.
    """

    def __init__(self, buffers: Mapping[int, Mapping], arena_size: str, no_reuse_size: str, cache_size: int = 64):
        self._buffers = {
            vid: (compile_expr(b["offset"])[0], compile_expr(b["size"])[0]) for vid, b in buffers.items()
        }
        self._arena = compile_expr(arena_size)[0]
        self._no_reuse = compile_expr(no_reuse_size)[0]
        self.texts = {"arena_size": arena_size, "no_reuse_size": no_reuse_size}
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.evaluations = 0  # layouts computed (cache misses)

    @classmethod
    def from_plan(cls, plan) -> ArenaPlan:
        """From a :class:`kiln.transforms.plan_memory.MemoryPlan`."""
        return cls(plan.buffers, plan.arena_size, plan.no_reuse_size)

    def layout(self, binding: Mapping[str, int]) -> ArenaLayout:
        """The layout at ``binding``: evaluated on first sight, then cached."""
        key = tuple(sorted(binding.items()))
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        env = dict(binding)
        offsets = {vid: (off(env), size(env)) for vid, (off, size) in self._buffers.items()}
        layout = ArenaLayout(self._arena(env), self._no_reuse(env), offsets)
        for vid, (off, n) in offsets.items():
            if off < 0 or off + n > layout.arena_bytes:
                raise KilnError(f"memory plan puts value {vid} at [{off}, {off + n}) outside the arena of {layout.arena_bytes} bytes")
        with self._lock:
            self._cache[key] = layout
            self.evaluations += 1
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return layout


_HUGE_PAGE = 2 << 20


def _huge_page_buffer(nbytes: int) -> torch.Tensor | None:
    """``nbytes`` of a fresh anonymous mapping, from a 2 MiB boundary, that
    Linux is asked to back with 2 MiB pages before any of it is touched
    (transparent huge pages in ``madvise`` mode back nothing unasked), as a
    flat ``uint8`` tensor; None off Linux or with ``KILN_HUGEPAGES=0``.

    A convolution reads its input a channel row at a time, each row in
    another 4 KiB page: the packing of ResNet-50's 56-wide pointwise layers
    missed the TLB on every row (C harness, those layers 0.95-0.96x with
    their buffers in huge pages; ResNet-50 0.993x, worker pairs).  The
    advice had been given on ``torch.empty``'s memory, which malloc may hand
    back from an earlier model with its small pages already faulted in: then
    nothing changed.  The tensor keeps the mapping alive."""
    if not sys.platform.startswith("linux") or os.environ.get("KILN_HUGEPAGES", "1") == "0" \
            or not hasattr(mmap, "MADV_HUGEPAGE"):
        return None
    # Private: a shared anonymous mapping is shmem, whose huge pages are another setting.
    mm = mmap.mmap(-1, nbytes + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mm.madvise(mmap.MADV_HUGEPAGE)
    whole = torch.frombuffer(mm, dtype=torch.uint8)
    skip = -whole.data_ptr() % _HUGE_PAGE
    return whole[skip:skip + nbytes]


class ArenaPool:
    """Arenas keyed by size: :meth:`acquire` reuses a free one of that exact
    size or allocates one; :meth:`release` returns it (at most ``max_free``
    kept per size)."""

    def __init__(self, max_free: int = 16):
        self._free: dict[int, list[torch.Tensor]] = {}
        self._lock = threading.Lock()
        self.max_free = max_free
        self.allocations = 0
        self.reuses = 0
        self.in_use = 0
        self.peak_in_use = 0

    def acquire(self, nbytes: int) -> torch.Tensor:
        """A flat ``uint8`` tensor of ``nbytes`` bytes, owned by the caller until released."""
        with self._lock:
            free = self._free.get(nbytes)
            if free:
                buf = free.pop()
                self.reuses += 1
            else:
                buf = None
                self.allocations += 1
            self.in_use += 1
            self.peak_in_use = max(self.peak_in_use, self.in_use)
        if buf is None:
            buf = _huge_page_buffer(nbytes) if nbytes >= 2 * _HUGE_PAGE else None
            if buf is None:
                buf = torch.empty(max(nbytes, 1), dtype=torch.uint8)
        return buf

    def release(self, buf: torch.Tensor, nbytes: int | None = None) -> None:
        """Give an arena (acquired for ``nbytes``, default its size) back to the pool."""
        nbytes = buf.numel() if nbytes is None else nbytes
        with self._lock:
            self.in_use -= 1
            free = self._free.setdefault(nbytes, [])
            if len(free) < self.max_free:
                free.append(buf)

    def stats(self) -> dict:
        """Allocations, reuses and arenas in use (peak) as plain data."""
        with self._lock:
            return {
                "allocations": self.allocations,
                "reuses": self.reuses,
                "peak_in_use": self.peak_in_use,
                "pooled_bytes": sum(b.numel() for bs in self._free.values() for b in bs),
            }
