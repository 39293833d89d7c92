"""The memory arena: plan layouts per bound shape, and a pool of arenas by size.

A :class:`ArenaPlan` holds the symbolic plan of ``kiln-plan-memory``
(offsets, sizes, the arena size) compiled to closures.  Its
:meth:`~ArenaPlan.layout` evaluates them once per bound shape and caches the
result, so a repeated shape costs one dict lookup.  An :class:`ArenaPool`
hands out arenas (flat ``uint8`` torch tensors) keyed by their exact size and
takes them back after the call, so a model allocates one arena per
*concurrent call shape*, not one buffer per tensor.  Arenas are per call: two
threads never share one, which is what makes a model safe to call from
several threads at once.  What the pool keeps between calls is bounded in
bytes (:attr:`ArenaPool.cap`; least recently used arenas go first), so a
model called at ever new shapes does not keep an arena of each.

Views into an arena (made by :class:`~kiln.runtime.executor.Executor`) are
torch tensors sharing its memory; ``.numpy()`` on them is free as well.
"""

from __future__ import annotations

import mmap
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..errors import KilnError
from .contract import compile_expr

__all__ = ["MIN_POOL_BYTES", "ArenaLayout", "ArenaPlan", "ArenaPool", "pool_bytes_setting", "torch_dtype"]

_TORCH_DTYPES = {
    "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
    "i1": torch.bool, "i8": torch.int8, "ui8": torch.uint8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
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
    from ..options import current

    if not sys.platform.startswith("linux") or not current().hugepages or not hasattr(mmap, "MADV_HUGEPAGE"):
        return None
    # Private: a shared anonymous mapping is shmem, whose huge pages are another setting.
    mm = mmap.mmap(-1, nbytes + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mm.madvise(mmap.MADV_HUGEPAGE)
    whole = torch.frombuffer(mm, dtype=torch.uint8)
    skip = -whole.data_ptr() % _HUGE_PAGE
    return whole[skip:skip + nbytes]


#: The least the pool may keep (idle arenas and fast paths' arenas together)
#: when no cap is given: below it, shapes come and go without any eviction.
#: Small, so that the default keeps RSS within about twice the largest arena
#: (the issue's bound) for any model whose arenas reach 16 MiB.
MIN_POOL_BYTES = 32 << 20


def pool_bytes_setting(value=None, what: str = "arena_pool_bytes") -> int | None:
    """The pool's byte cap from ``value`` (the ``arena_pool_bytes`` option),
    else from ``KILN_ARENA_POOL_BYTES``; None (automatic) when neither is set.

    An int of bytes >= 0, or text such as ``"512M"`` / ``"2GiB"`` (binary
    units).  Anything else is a KilnError naming the setting and the value.
    """
    from ..options import current, parse_bytes

    if value is None:
        return current().arena_pool_bytes  # KILN_ARENA_POOL_BYTES, parsed (and checked) there
    return parse_bytes(value, what)


class ArenaPool:
    """Arenas keyed by size: :meth:`acquire` reuses a free one of that exact
    size or allocates one; :meth:`release` returns it (at most ``max_free``
    kept per size).

    What the pool keeps between calls is bounded in bytes: the idle arenas
    plus the arenas held by fast paths (acquired with ``keep=True`` until
    released) stay within :attr:`cap`, which is ``max_bytes`` (the
    ``arena_pool_bytes`` option, or ``KILN_ARENA_POOL_BYTES``) or, unset,
    ``max(2 x the largest arena acquired, MIN_POOL_BYTES)``.  Past it the
    least recently used idle arenas are freed; an arena in use is never
    touched.  Without the bound, a model called at thousands of distinct
    shapes kept an arena of every size (RSS 0.5 -> 4.1 GB).
    """

    def __init__(self, max_free: int = 16, max_bytes: int | None = None):
        # size -> idle arenas of that size; sizes in least- to most-recently-used order.
        self._free: OrderedDict[int, list[torch.Tensor]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_free = max_free
        self._max_bytes = pool_bytes_setting(max_bytes)
        self.allocations = 0
        self.reuses = 0
        self.evictions = 0
        self.in_use = 0
        self.peak_in_use = 0
        self.idle_bytes = 0
        self.kept_bytes = 0  # held by fast paths (acquire(keep=True)) until released
        self.largest = 0  # the largest arena acquired

    @property
    def max_bytes(self) -> int | None:
        """The configured cap (None: automatic, see :attr:`cap`)."""
        return self._max_bytes

    @max_bytes.setter
    def max_bytes(self, value) -> None:
        self._max_bytes = pool_bytes_setting(value) if value is not None else None
        with self._lock:
            dropped = self._trim()
        del dropped  # freed outside the lock

    @property
    def cap(self) -> int:
        """Bytes the pool may keep between calls: idle arenas plus kept ones."""
        if self._max_bytes is not None:
            return self._max_bytes
        return max(2 * self.largest, MIN_POOL_BYTES)

    def _trim(self) -> list:
        """Evict least-recently-used idle arenas until the pool is within its
        cap; the evicted tensors, for the caller to drop outside the lock
        (freeing a big mapping is a syscall).  Call with the lock held."""
        dropped = []
        cap = self.cap
        while self._free and self.idle_bytes + self.kept_bytes > cap:
            size, bufs = next(iter(self._free.items()))
            dropped.append(bufs.pop())
            self.idle_bytes -= size
            self.evictions += 1
            if not bufs:
                del self._free[size]
        return dropped

    def acquire(self, nbytes: int, keep: bool = False) -> torch.Tensor:
        """A flat ``uint8`` tensor of ``nbytes`` bytes, owned by the caller
        until released; ``keep``: held across calls (a fast path's), counted
        against the cap until released with ``kept=True``."""
        dropped = ()
        with self._lock:
            free = self._free.get(nbytes)
            if free:
                buf = free.pop()
                self.idle_bytes -= nbytes
                if free:
                    self._free.move_to_end(nbytes)
                else:
                    del self._free[nbytes]
                self.reuses += 1
            else:
                buf = None
                self.allocations += 1
            self.in_use += 1
            self.peak_in_use = max(self.peak_in_use, self.in_use)
            self.largest = max(self.largest, nbytes)
            if keep:
                self.kept_bytes += nbytes
                dropped = self._trim()
        del dropped
        if buf is None:
            buf = _huge_page_buffer(nbytes) if nbytes >= 2 * _HUGE_PAGE else None
            if buf is None:
                buf = torch.empty(max(nbytes, 1), dtype=torch.uint8)
        return buf

    def release(self, buf: torch.Tensor, nbytes: int | None = None, kept: bool = False) -> None:
        """Give an arena (acquired for ``nbytes``, default its size; ``kept``
        if acquired with ``keep=True``) back to the pool, which keeps it idle
        while within its bounds."""
        nbytes = buf.numel() if nbytes is None else nbytes
        with self._lock:
            self.in_use -= 1
            if kept:
                self.kept_bytes -= nbytes
            free = self._free.get(nbytes)
            if free is None:
                free = self._free[nbytes] = []
            else:
                self._free.move_to_end(nbytes)
            if len(free) < self.max_free:
                free.append(buf)
                self.idle_bytes += nbytes
            elif not free:
                del self._free[nbytes]
            dropped = self._trim()
        del dropped, buf

    def over_cap(self) -> bool:
        """Whether the kept arenas alone exceed the cap (the fast paths' owner
        then closes some: only it can)."""
        with self._lock:
            return self.kept_bytes > self.cap

    def stats(self) -> dict:
        """Allocations, reuses, evictions, arenas in use (peak) and the bytes
        kept (idle, held by fast paths, the cap) as plain data."""
        with self._lock:
            return {
                "allocations": self.allocations,
                "reuses": self.reuses,
                "evictions": self.evictions,
                "peak_in_use": self.peak_in_use,
                "pooled_bytes": self.idle_bytes,
                "kept_bytes": self.kept_bytes,
                "cap_bytes": self.cap,
                "largest_bytes": self.largest,
            }
