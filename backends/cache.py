"""The persistent kernel cache shared by kiln's backends.

Layout under the cache root (``$KILN_CACHE_DIR``, else
``$XDG_CACHE_HOME/kiln``, else ``~/.cache/kiln``; checked and, when others
can write to it, replaced by a private per-user folder: see
:mod:`kiln.backends.cache_root`)::

    <root>/.kiln-cache                    the marker: kiln made this root (``kiln cache clear`` needs it)
    <root>/<kind>/<key[:2]>/<key>.entry   one entry (kinds: kernel, tune, binary, choice, ...)
    <root>/cpu/<key[:2]>/<key>.so         a CPU kernel library, + ``.so.sha256``, its digest
    <root>/src/<sha256>.py                generated Triton source, content-addressed
    <root>/triton/                        Triton's own compile cache (TRITON_CACHE_DIR)

An entry is ``KILNCACHE1\\n`` + a JSON header line (``size``, ``sha256`` of
the payload, free-form ``meta``) + the payload.  Reads check all three; an
entry that fails (truncated, corrupted, foreign) is deleted and reported as a
miss, so the caller rebuilds and rewrites it.  Files loaded as they are (CPU
libraries, the native runtime) carry a sidecar digest instead
(:func:`write_digest` / :func:`verify_digest`).  Writes go to a temporary
file in the same folder and are moved into place with ``os.replace``:
readers in other processes see the old entry or the new one, never half of
one.  Folders kiln creates are ``0o700``.

Keys (:func:`make_key`) hash the kernel IR's digest, the shape bucket, the
target, and the kiln / Triton / MLIR versions plus the cache format, so an
upgrade never reads a stale entry; no key holds the cache's own path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import KilnError
from ..runtime.digest import (
    DIGEST_SUFFIX,
    digest_path,
    digest_problem,
    verify_digest,
    write_atomically,
    write_digest,
)
from .cache_root import KNOWN_DIRS, MARKER, configured_cache_dir, is_kind_dir, private_mkdir, safe_cache_root

#: Hits and misses at INFO (damaged entries are warnings, see cache_root).
_log = logging.getLogger("kiln.cache")

__all__ = [
    "CACHE_FORMAT",
    "DIGEST_SUFFIX",
    "CacheStats",
    "KernelCache",
    "configured_cache_dir",
    "default_cache",
    "default_cache_dir",
    "digest_path",
    "digest_problem",
    "make_key",
    "shape_bucket",
    "verify_digest",
    "versions",
    "write_digest",
]

CACHE_FORMAT = 1
_MAGIC = b"KILNCACHE1\n"


def default_cache_dir() -> Path:
    """The cache root in use: ``$KILN_CACHE_DIR``, else the user cache dir +
    ``/kiln``, when it is safe (owned by this user, not world-writable, see
    :mod:`kiln.backends.cache_root`); else a private per-user folder, with a
    warning.  Created (``0o700``) when missing."""
    return safe_cache_root(configured_cache_dir())


_VERSIONS: dict[str, str] | None = None


def versions() -> dict[str, str]:
    """Versions that make up every key: kiln, triton, the MLIR bindings, the format."""
    global _VERSIONS
    if _VERSIONS is None:
        from importlib import metadata

        from .. import __version__

        def ver(dist: str) -> str:
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                return "none"

        _VERSIONS = {
            "kiln": __version__,
            "triton": ver("triton"),
            "mlir": ver("torch-mlir"),
            "format": str(CACHE_FORMAT),
        }
    return dict(_VERSIONS)


def _next_pow2(v: int) -> int:
    return 1 if v <= 1 else 1 << (int(v) - 1).bit_length()


def shape_bucket(binding: Mapping[str, int]) -> dict[str, int]:
    """Each symbol's value rounded up to a power of two: shapes in one bucket
    share tuning decisions."""
    return {k: _next_pow2(v) for k, v in sorted(binding.items())}


def make_key(kind: str, ir_digest: str, bucket: Mapping[str, int] | None, target: str, **extra: Any) -> str:
    """The cache key (sha256 hex) of an entry."""
    payload = {
        "kind": kind,
        "ir": ir_digest,
        "bucket": dict(sorted((bucket or {}).items())),
        "target": target,
        "versions": versions(),
        "extra": extra,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class CacheStats:
    """Counters of one :class:`KernelCache` object (this process only)."""

    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    writes: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=dict)

    def count(self, kind: str, hit: bool) -> None:
        entry = self.by_kind.setdefault(kind, [0, 0])
        entry[0 if hit else 1] += 1
        if hit:
            self.hits += 1
        else:
            self.misses += 1


def _atomic_write(path: Path, data: bytes) -> None:
    private_mkdir(path.parent)  # the cache's folders are the user's alone
    write_atomically(path, data)


class KernelCache:
    """A persistent, process-safe key -> bytes store (see the module docstring)."""

    def __init__(self, root: str | os.PathLike | None = None):
        # Checked like the default root: a root others can write to is
        # replaced by the private fallback (see kiln.backends.cache_root).
        self.root = safe_cache_root(root) if root is not None else default_cache_dir()
        self.stats = CacheStats()
        self._lock = threading.Lock()

    # -- entries -----------------------------------------------------------

    def path(self, kind: str, key: str) -> Path:
        """Where entry ``key`` of ``kind`` lives."""
        return self.root / kind / key[:2] / f"{key}.entry"

    def get(self, kind: str, key: str) -> tuple[bytes, dict] | None:
        """``(payload, meta)`` of a valid entry, else None (a bad one is deleted)."""
        p = self.path(kind, key)
        try:
            data = p.read_bytes()
        except OSError:
            _log.info("kernel cache miss: %s", p)
            self.stats.count(kind, False)
            return None
        parsed = self._parse(data)
        if parsed is None:
            self.stats.corrupt += 1
            try:
                p.unlink()
            except OSError:
                pass
            self.stats.count(kind, False)
            return None
        _log.info("kernel cache hit: %s", p)
        self.stats.count(kind, True)
        return parsed

    @staticmethod
    def _parse(data: bytes) -> tuple[bytes, dict] | None:
        if not data.startswith(_MAGIC):
            return None
        rest = data[len(_MAGIC) :]
        nl = rest.find(b"\n")
        if nl < 0:
            return None
        try:
            header = json.loads(rest[:nl])
            payload = rest[nl + 1 :]
            if len(payload) != header["size"] or hashlib.sha256(payload).hexdigest() != header["sha256"]:
                return None
            meta = header.get("meta", {})
            return (payload, meta) if isinstance(meta, dict) else None
        except (ValueError, KeyError, TypeError, RecursionError):  # a damaged header: a miss
            return None

    def put(self, kind: str, key: str, payload: bytes, meta: dict | None = None) -> Path:
        """Write an entry atomically; returns its path."""
        header = {"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest(), "meta": meta or {}}
        data = _MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload
        p = self.path(kind, key)
        _atomic_write(p, data)
        self.stats.writes += 1
        return p

    def get_json(self, kind: str, key: str) -> Any | None:
        """A JSON entry's value, or None."""
        got = self.get(kind, key)
        if got is None:
            return None
        try:
            return json.loads(got[0])
        except (ValueError, RecursionError):  # not JSON (or nested past the parser): a miss
            self.path(kind, key).unlink(missing_ok=True)
            return None

    def put_json(self, kind: str, key: str, value: Any, meta: dict | None = None) -> Path:
        """Write a JSON entry."""
        return self.put(kind, key, json.dumps(value, sort_keys=True).encode(), meta)

    # -- generated source --------------------------------------------------

    def source_file(self, text: str) -> Path:
        """A ``.py`` file holding ``text``, content-addressed by its sha256.

        A file whose content no longer matches its name (truncated by a
        crash, edited) is rewritten.  Triton reads kernel source from files
        (``inspect``), so generated code must live on disk.
        """
        digest = hashlib.sha256(text.encode()).hexdigest()
        p = self.root / "src" / f"k{digest[:32]}.py"
        with self._lock:
            try:
                ok = hashlib.sha256(p.read_bytes()).hexdigest() == digest
            except OSError:
                ok = False
            self.stats.count("src", ok)
            if not ok:
                if p.exists():
                    self.stats.corrupt += 1
                _atomic_write(p, text.encode())
                self.stats.writes += 1
        return p

    def triton_dir(self) -> Path:
        """Where Triton's own compile cache goes (used unless TRITON_CACHE_DIR is set)."""
        return self.root / "triton"

    # -- maintenance -------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Entry counts and bytes per kind, and the root."""
        kinds: dict[str, dict[str, int]] = {}
        if self.root.is_dir():
            for sub in sorted(self.root.iterdir()):
                if not sub.is_dir():
                    continue
                n = size = 0
                for f in sub.rglob("*"):
                    if f.is_file() and not f.name.startswith(".tmp-"):
                        n += 1
                        size += f.stat().st_size
                kinds[sub.name] = {"entries": n, "bytes": size}
        return {
            "root": str(self.root),
            "kinds": kinds,
            "entries": sum(k["entries"] for k in kinds.values()),
            "bytes": sum(k["bytes"] for k in kinds.values()),
            "versions": versions(),
        }

    def clear(self) -> int:
        """Delete kiln's entries; returns how many files were removed.

        Only a root with kiln's marker file (written when kiln created the
        root, or found it empty) is cleared, and only kiln's folders in it
        (``cpu``, ``native``, ``src``, ``triton`` and the entry kinds'
        ``<kind>/<xx>/*.entry``) and its temporary files; the marker stays.
        Raises :class:`KilnError` for a root without the marker.
        """
        root = self.root
        if not root.is_dir():
            return 0
        if not (root / MARKER).is_file():
            raise KilnError(f"refusing to clear {root}: it has no {MARKER} marker, so it is not a cache "
                            f"kiln created (it may hold other files); delete its kiln folders yourself")
        n = 0
        for sub in list(root.iterdir()):
            if sub.is_symlink():
                continue
            if sub.is_dir() and (sub.name in KNOWN_DIRS or is_kind_dir(sub)):
                n += sum(1 for f in sub.rglob("*") if f.is_file())
                shutil.rmtree(sub, ignore_errors=True)
            elif sub.is_file() and sub.name.startswith(".tmp-"):
                sub.unlink(missing_ok=True)
                n += 1
        return n


_CACHES: dict[str, KernelCache] = {}


def default_cache() -> KernelCache:
    """The process's cache object for the current :func:`default_cache_dir`."""
    root = str(default_cache_dir())
    if root not in _CACHES:
        _CACHES[root] = KernelCache(root)
    return _CACHES[root]
