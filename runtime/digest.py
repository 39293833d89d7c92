"""Sidecar digests: a file the loader maps directly (a CPU kernel entry's
``.so``, the native library) cannot carry a header, so its digest lives
beside it in ``<file>.sha256``: ``KILNDIGEST1\n`` + a JSON line with the
file's name, size, sha256 and the key it was stored under.  A damaged file
fails on size or sha256, and a file copied in from another key (with or
without its sidecar) fails on the sha256 or on the recorded name / key.

In the runtime (the native library is checked before every ``dlopen``); the
kernel cache (:mod:`kiln.backends.cache`) re-exports these.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

__all__ = ["DIGEST_SUFFIX", "digest_path", "digest_problem", "verify_digest", "write_atomically", "write_digest"]

#: The sidecar digest of ``x.so`` is ``x.so`` + this.
DIGEST_SUFFIX = ".sha256"
_DIGEST_MAGIC = b"KILNDIGEST1\n"


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` through a temporary file in its folder (which must exist)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def digest_path(path: str | os.PathLike) -> Path:
    """Where the sidecar digest of ``path`` lives (``<path>.sha256``)."""
    return Path(os.fspath(path) + DIGEST_SUFFIX)


def write_digest(path: str | os.PathLike, key: str | None = None, data: bytes | None = None) -> Path:
    """Write the sidecar digest of ``path`` (atomically); returns the sidecar's path.

    ``data``: the file's bytes when the caller has them (else it is read);
    ``key``: the cache key the file is stored under, checked again by
    :func:`verify_digest`.  Write the sidecar *before* moving the file into
    place: a reader then never finds a new file without its digest.
    """
    if data is None:
        data = Path(path).read_bytes()
    record = {"name": os.path.basename(os.fspath(path)), "size": len(data),
              "sha256": hashlib.sha256(data).hexdigest(), "key": key}
    side = digest_path(path)
    write_atomically(side, _DIGEST_MAGIC + json.dumps(record, sort_keys=True).encode() + b"\n")
    return side


def digest_problem(path: str | os.PathLike, key: str | None = None, data: bytes | None = None) -> str | None:
    """Why ``path`` does not match its sidecar digest, or None when it does.

    ``data``: the bytes to check (pass what you read once and then use, so
    the file cannot change between the check and the use); ``key``: the key
    the file must have been stored under (None: not checked).
    """
    side = digest_path(path)
    try:
        raw = side.read_bytes()
    except OSError:
        return f"no digest file {side.name}"
    try:
        if not raw.startswith(_DIGEST_MAGIC):
            raise ValueError
        record = json.loads(raw[len(_DIGEST_MAGIC):])
        name, size, sha, stored_key = record["name"], record["size"], record["sha256"], record["key"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return f"unreadable digest file {side.name}"
    if name != os.path.basename(os.fspath(path)):
        return f"digest written for {name!r}"
    if key is not None and stored_key != key:
        return "stored under another key"
    if data is None:
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            return f"unreadable ({e.strerror or e})"
    if len(data) != size:
        return f"{len(data)} bytes, {size} expected"
    if hashlib.sha256(data).hexdigest() != sha:
        return "sha256 mismatch"
    return None


def verify_digest(path: str | os.PathLike, key: str | None = None, data: bytes | None = None) -> bool:
    """Whether ``path`` (or ``data``, its bytes) matches its sidecar digest
    (and was stored under ``key``, when given); see :func:`digest_problem`."""
    return digest_problem(path, key, data) is None
