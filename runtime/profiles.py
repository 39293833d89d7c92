"""Optimization profiles (TensorRT's min/opt/max) and the policy outside them.

``kiln.compile(..., profiles=[{"B": (1, 4, 8)}, {"B": (9, 32, 64), "L": (1, 128, 512)}])``
gives two profiles; each is a specialization whose kernel choices are made
for its ``opt`` point.  At call time :class:`ProfileSelector` picks the first
profile containing the bound shape.  Outside every profile the policy
decides:

- ``"error"``: a ShapeError naming the nearest profile;
- ``"specialize"``: compile a specialization for the shape's *bucket* (each
  symbol's value rounded up to a power of two, clipped to its range), cache
  it, and reuse it for every shape in the bucket -- at most ``budget``
  distinct buckets per symbol; past the budget, the generic kernels run;
- ``"generic"``: the fully dynamic kernels.

The selector counts profile hits, specializations compiled, cache hits and
generic calls; :mod:`kiln.runtime.report` reports them.
"""

from __future__ import annotations

import logging
import numbers
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import KilnError, ShapeError

#: Specializations compiled at run time, at INFO.
_log = logging.getLogger("kiln.runtime")

__all__ = ["POLICIES", "Profile", "ProfileSelector", "Selection", "bucket_of", "normalize_profiles"]

POLICIES = ("error", "specialize", "generic")


@dataclass(frozen=True)
class Profile:
    """One optimization profile: ``ranges[symbol] = (min, opt, max)``.

    Symbols a profile does not mention range over their whole declaration.
    """

    name: str
    ranges: tuple[tuple[str, tuple[int, int, int]], ...]
    kind: str = "profile"  # "profile" or "specialization"

    @property
    def range_map(self) -> dict[str, tuple[int, int, int]]:
        return dict(self.ranges)

    def bounds(self, symbol: str, symbols: Mapping) -> tuple[int, int]:
        """``(min, max)`` of ``symbol`` in this profile (its declared range if unmentioned)."""
        r = self.range_map.get(symbol)
        if r is not None:
            return r[0], r[2]
        s = symbols.get(symbol)
        return (s.min, s.max) if s is not None else (0, 2**63 - 1)

    def contains(self, binding: Mapping[str, int]) -> bool:
        """True when every symbol the profile constrains lies in its [min, max]."""
        for name, (lo, _, hi) in self.ranges:
            v = binding.get(name)
            if v is not None and not lo <= v <= hi:
                return False
        return True

    def distance(self, binding: Mapping[str, int]) -> float:
        """How far ``binding`` is outside the profile: the sum over symbols of the
        relative distance to the nearest bound (0 inside)."""
        total = 0.0
        for name, (lo, _, hi) in self.ranges:
            v = binding.get(name)
            if v is None:
                continue
            if v < lo:
                total += (lo - v) / max(lo, 1)
            elif v > hi:
                total += (v - hi) / max(hi, 1)
        return total

    def opt_binding(self, symbols: Mapping) -> dict[str, int]:
        """The shape kernels are chosen for: each symbol's opt (profile's, else
        its declaration's, else its max)."""
        out = {}
        for name, s in symbols.items():
            out[name] = s.opt if s.opt is not None else s.max
        for name, (_, opt, _) in self.ranges:
            out[name] = opt
        return out

    def text(self) -> str:
        """``small B in [1, 8], L in [1, 128]``."""
        parts = ", ".join(f"{n} in [{lo}, {hi}]" for n, (lo, _, hi) in self.ranges)
        return f"{self.name} {parts}" if parts else self.name

    def describe(self) -> dict:
        """The profile as plain data."""
        return {
            "name": self.name,
            "kind": self.kind,
            "ranges": {n: {"min": lo, "opt": opt, "max": hi} for n, (lo, opt, hi) in self.ranges},
        }


def _integer(v) -> bool:
    """An int or numpy integer, not a bool (``int()`` would take 1.5 as 1, True as 1)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _triple(name: str, sym: str, r) -> tuple[int, int, int]:
    """``(min, opt, max)`` of symbol ``sym`` in profile ``name``, all integers."""
    try:
        if isinstance(r, (str, bytes, Mapping)):
            raise TypeError
        lo, opt, hi = r
    except (TypeError, ValueError):
        raise KilnError(f"profile '{name}' symbol '{sym}': expected (min, opt, max), got {r!r}") from None
    for what, v in (("min", lo), ("opt", opt), ("max", hi)):
        if not _integer(v):
            raise KilnError(f"profile '{name}' symbol '{sym}': {what} must be an integer, got {v!r} (in {r!r})")
    return int(lo), int(opt), int(hi)


def _profile_from(spec, index: int, symbols: Mapping) -> Profile:
    if isinstance(spec, Profile):
        return spec
    if not isinstance(spec, Mapping):
        raise KilnError(f"profile #{index} must be a dict of symbol -> (min, opt, max), got {spec!r}")
    spec = dict(spec)
    name = str(spec.pop("name", f"profile{index}"))
    ranges = []
    for sym, r in spec.items():
        if sym not in symbols:
            known = ", ".join(sorted(symbols)) or "none"
            raise KilnError(f"profile '{name}' names unknown symbol '{sym}' (symbols: {known})")
        lo, opt, hi = _triple(name, sym, r)
        if not lo <= opt <= hi:
            raise KilnError(f"profile '{name}' symbol '{sym}': needs min <= opt <= max, got ({lo}, {opt}, {hi})")
        s = symbols[sym]
        if lo < s.min or hi > s.max:
            raise KilnError(
                f"profile '{name}' symbol '{sym}': [{lo}, {hi}] is outside the declared range {s.range_text()}"
            )
        ranges.append((sym, (lo, opt, hi)))
    return Profile(name, tuple(sorted(ranges)))


def normalize_profiles(profiles, symbols: Mapping) -> list[Profile]:
    """Profiles from the user's form: a list of dicts (an optional ``"name"``
    key; default ``profile0``, ``profile1``, ...) or a dict of name -> dict.

    Raises KilnError for unknown symbols, bad triples, ranges outside the
    declaration, and duplicate names.
    """
    if not profiles:
        return []
    if isinstance(profiles, Mapping):
        items = [{"name": n, **dict(p)} for n, p in profiles.items()]
    else:
        items = list(profiles)
    out = [_profile_from(p, i, symbols) for i, p in enumerate(items)]
    names = [p.name for p in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise KilnError(f"two profiles are named '{dup}'")
    return out


def bucket_of(value: int, lo: int, hi: int) -> tuple[int, int]:
    """The specialization bucket of ``value``: ``(2**(k-1), 2**k]`` around it,
    clipped to ``[lo, hi]``; values 0 and 1 are buckets of their own."""
    if value <= 1:
        return max(lo, value), min(hi, value)
    top = 1 << (value - 1).bit_length()
    return max(lo, top // 2 + 1), min(hi, top)


@dataclass
class Selection:
    """What serves one call: a profile, a cached specialization, or the generic kernels."""

    kind: str  # "profile", "specialization" or "generic"
    profile: Profile | None
    variant: object
    cache_hit: bool = False

    @property
    def label(self) -> str:
        """``"profile small"``, ``"generic"``: what the report says served a call."""
        return self.kind if self.profile is None else f"{self.kind} {self.profile.name}"


@dataclass
class _Counts:
    profile_hits: dict[str, int] = field(default_factory=dict)
    specializations: int = 0
    cache_hits: int = 0
    generic_calls: int = 0
    budget_exceeded: int = 0


class ProfileSelector:
    """Picks what serves each call shape, and compiles specializations lazily.

    ``build(profile_or_None)`` returns a variant (whatever the model runs: a
    set of kernels); it is called once per profile up front, once for the
    generic variant, and once per new specialization.  ``budget`` is the
    number of distinct buckets each symbol may be specialized for (an int for
    every symbol, or a dict by symbol name).
    """

    def __init__(
        self,
        profiles: Sequence[Profile],
        symbols: Mapping,
        build: Callable,
        policy: str = "error",
        budget: int | Mapping[str, int] = 4,
    ):
        if policy not in POLICIES:
            raise KilnError(f"policy must be one of {', '.join(POLICIES)}, got '{policy}'")
        for sym, b in (budget.items() if isinstance(budget, Mapping) else [(None, budget)]):
            if not _integer(b) or b < 0:
                where = "budget" if sym is None else f"budget of symbol '{sym}'"
                raise KilnError(f"{where} must be an integer >= 0 (specialized buckets), got {b!r}")
        self.profiles = list(profiles)
        self.symbols = dict(symbols)
        self.policy = policy
        self._budget = budget
        self._build = build
        self._lock = threading.Lock()
        self.counts = _Counts()
        self.variants = {p.name: build(p) for p in self.profiles}
        self._generic = None
        self._specs: dict[tuple, tuple[Profile, object]] = {}
        self._used_buckets: dict[str, set] = {}
        if not self.profiles or policy in ("generic", "specialize"):
            self._generic = build(None)

    def budget_for(self, symbol: str) -> int:
        """How many buckets ``symbol`` may be specialized for."""
        if isinstance(self._budget, Mapping):
            return int(self._budget.get(symbol, 0))
        return int(self._budget)

    @property
    def generic(self):
        """The fully dynamic variant (built on first use)."""
        with self._lock:
            if self._generic is None:
                self._generic = self._build(None)
            return self._generic

    def nearest(self, binding: Mapping[str, int]) -> Profile:
        """The profile closest to ``binding`` (the first on a tie)."""
        return min(self.profiles, key=lambda p: p.distance(binding))

    def select(self, binding: Mapping[str, int]) -> Selection:
        """The variant for one bound call shape; ShapeError under policy "error"."""
        for p in self.profiles:
            if p.contains(binding):
                with self._lock:
                    self.counts.profile_hits[p.name] = self.counts.profile_hits.get(p.name, 0) + 1
                return Selection("profile", p, self.variants[p.name])
        # Without profiles the declared ranges are the one profile: only
        # "specialize" still has something to do.
        if self.policy == "generic" or (not self.profiles and self.policy == "error"):
            with self._lock:
                self.counts.generic_calls += 1
            return Selection("generic", None, self.generic)
        if self.policy == "error":
            near = self.nearest(binding)
            shape = ", ".join(f"{n} = {binding[n]}" for n in sorted(binding) if n in near.range_map)
            raise ShapeError(
                f"shape {shape} is outside every profile (nearest: {near.text()}); "
                f"compile with policy='specialize' or 'generic' to run it"
            )
        return self._specialize(binding)

    def repeat_counter(self, selection: Selection):
        """A function counting one more call the way :meth:`select` counts a
        repeat of the binding that made ``selection`` (a profile hit, a
        generic call, a specialization's cache hit), for a call that skips
        :meth:`select` (:mod:`kiln.runtime.fastcall`); None when a repeat is
        counted otherwise (a generic call over the specialization budget)."""
        counts, lock = self.counts, self._lock
        if selection.kind == "profile":
            name = selection.profile.name

            def count():
                with lock:
                    counts.profile_hits[name] = counts.profile_hits.get(name, 0) + 1
        elif selection.kind == "generic" and (self.policy == "generic" or (not self.profiles and self.policy == "error")):
            def count():
                with lock:
                    counts.generic_calls += 1
        elif selection.kind == "specialization":  # cached from now on: a repeat is a cache hit
            def count():
                with lock:
                    counts.cache_hits += 1
        else:
            return None
        return count

    def _specialize(self, binding: Mapping[str, int]) -> Selection:
        buckets = {}
        for name in sorted(binding):
            s = self.symbols.get(name)
            lo, hi = (s.min, s.max) if s is not None else (0, 2**63 - 1)
            buckets[name] = bucket_of(binding[name], lo, hi)
        key = tuple(sorted(buckets.items()))
        with self._lock:
            hit = self._specs.get(key)
            if hit is not None:
                self.counts.cache_hits += 1
                return Selection("specialization", hit[0], hit[1], cache_hit=True)
            over = [n for n, b in buckets.items() if b not in self._used_buckets.get(n, set())
                    and len(self._used_buckets.get(n, set())) >= self.budget_for(n)]
            if over:
                self.counts.budget_exceeded += 1
                self.counts.generic_calls += 1
                generic = self._generic
        if over:
            return Selection("generic", None, generic if generic is not None else self.generic)
        name = "spec " + ", ".join(f"{n} in [{lo}, {hi}]" for n, (lo, hi) in buckets.items())
        profile = Profile(
            name,
            tuple((n, (lo, min(max(binding[n], lo), hi), hi)) for n, (lo, hi) in buckets.items()),
            kind="specialization",
        )
        # Compile outside the lock: other shapes keep running meanwhile.  Two
        # threads racing on one bucket both compile; the first one is kept.
        start = time.perf_counter()
        variant = self._build(profile)
        _log.info("specialization compiled at run time: %s (for %s) in %.3f s", name,
                  ", ".join(f"{n}={v}" for n, v in sorted(binding.items())), time.perf_counter() - start)
        with self._lock:
            if key in self._specs:
                self.counts.cache_hits += 1
                p, v = self._specs[key]
                return Selection("specialization", p, v, cache_hit=True)
            self._specs[key] = (profile, variant)
            for n, b in buckets.items():
                self._used_buckets.setdefault(n, set()).add(b)
            self.counts.specializations += 1
        return Selection("specialization", profile, variant)

    @property
    def specializations(self) -> list[Profile]:
        """The specializations compiled so far, in order."""
        with self._lock:
            return [p for p, _ in self._specs.values()]

    def describe(self) -> dict:
        """Counters as plain data (for the report)."""
        with self._lock:
            c = self.counts
            variants = list(self.variants.items()) + [(p.name, v) for p, v in self._specs.values()]
            return {
                "policy": self.policy,
                "profiles": [p.name for p in self.profiles],
                "profile_hits": dict(c.profile_hits),
                "specializations": c.specializations,
                "specialization_names": [p.name for p, _ in self._specs.values()],
                "cache_hits": c.cache_hits,
                "generic_calls": c.generic_calls,
                "budget_exceeded": c.budget_exceeded,
                # Kernel choices per profile / specialization (see kiln.runtime.variants).
                "variants": {name: v.describe() for name, v in variants if hasattr(v, "describe")},
            }
