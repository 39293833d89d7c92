"""Where the kernel cache may live: the checks that make a cache root trusted.

Everything under the cache root ends up executed (``dlopen`` of CPU entries
and of the native library, ``import`` of generated Triton source), so a root
that another user can write to is a way into every process that uses it.
:func:`safe_cache_root` accepts a root only when

* it is a directory owned by this user (created ``0o700`` when missing),
  not world-writable (a sticky bit does not help: others could still create
  the sub-folders kiln has not made yet, and plant entries in them);
* none of its parents is world-writable without the sticky bit (else anyone
  could move the root aside and put their own in its place);
* the sub-folders kiln keeps in it (two levels: ``cpu/ab``,
  ``choice/cd``, ...) pass the same owner and mode checks.

Otherwise kiln falls back to a private per-user directory,
``<tempdir>/kiln-<uid>`` (``0o700``, a real directory owned by this user,
writable by nobody else), with one warning on the ``kiln.cache`` logger, or
raises :class:`~kiln.errors.KilnError` when that one is not safe either.

A root kiln created, or found empty or holding only kiln's own folders, gets
a marker file (:data:`MARKER`); ``kiln cache clear`` (``KernelCache.clear``)
refuses a root without one, so a ``KILN_CACHE_DIR`` pointed at a home
folder never gets emptied.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import tempfile
import threading
from pathlib import Path

from ..errors import KilnError

__all__ = ["KNOWN_DIRS", "MARKER", "configured_cache_dir", "is_kind_dir", "looks_like_kiln", "private_mkdir",
           "safe_cache_root"]

#: The file that says "kiln made this cache root" (its first line names the format).
MARKER = ".kiln-cache"
_MARKER_TEXT = b"kiln kernel cache 1\nkiln cache clear deletes the kiln folders beside this file\n"
#: Folders kiln writes under a root besides the entry kinds (``<kind>/<xx>/<key>.entry``).
KNOWN_DIRS = ("cpu", "native", "src", "triton")

_log = logging.getLogger("kiln.cache")
_lock = threading.Lock()
#: configured root (as given) -> the root in use, checked once per process.
_roots: dict[str, Path] = {}
_warned: set[str] = set()


def configured_cache_dir() -> Path:
    """The root asked for: the ``cache_dir`` option (``$KILN_CACHE_DIR``), else
    ``$XDG_CACHE_HOME/kiln``, else ``~/.cache/kiln`` (not checked: see
    :func:`safe_cache_root`)."""
    from ..options import current

    env = current().cache_dir
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kiln"


def private_mkdir(path: str | os.PathLike) -> Path:
    """Create ``path`` and any missing parents with mode ``0o700`` (``os.makedirs``
    gives intermediate folders the umask's mode); an existing folder is kept."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for p in reversed(missing):
        try:
            p.mkdir(mode=0o700)
        except FileExistsError:  # another process made it first
            pass
    return path


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        _log.warning(message)


def _dir_problem(path: Path, st: os.stat_result | None = None) -> str | None:
    """Why a folder of the cache cannot be trusted (None: it can)."""
    try:
        st = st or os.stat(path)
    except OSError as e:
        return f"{path} cannot be read ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & stat.S_IWOTH:
        return f"{path} is world-writable (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _root_problem(root: Path) -> str | None:
    """Why ``root`` (an existing folder) is not a safe cache root, or None."""
    problem = _dir_problem(root)
    if problem:
        return problem
    for parent in root.parents:
        try:
            st = os.stat(parent)
        except OSError:
            continue
        if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            return f"its parent {parent} is world-writable without the sticky bit"
    # kiln's own folders, two levels down (<kind>/<shard>): a planted entry
    # needs a writable one of them.
    try:
        with os.scandir(root) as it:
            subs = [e for e in it if e.is_dir()]
        for sub in subs:
            problem = _dir_problem(Path(sub.path))
            if problem:
                return problem
            with os.scandir(sub.path) as it:
                for shard in it:
                    if shard.is_dir():
                        problem = _dir_problem(Path(shard.path))
                        if problem:
                            return problem
    except OSError as e:
        return f"{root} cannot be listed ({e.strerror})"
    return None


_SHARD = re.compile(r"^[0-9a-f]{2}$")


def is_kind_dir(path: Path) -> bool:
    """Whether ``path`` holds only KILNCACHE1 entries (``<xx>/<key>.entry``,
    temporary ``.tmp-*`` files): a folder of one entry kind."""
    try:
        if path.is_symlink() or not path.is_dir():
            return False
        for shard in path.iterdir():
            if shard.is_symlink() or not shard.is_dir() or not _SHARD.match(shard.name):
                return False
            for f in shard.iterdir():
                if f.is_symlink() or not f.is_file() or not (f.name.endswith(".entry") or f.name.startswith(".tmp-")):
                    return False
    except OSError:
        return False
    return True


def looks_like_kiln(root: Path) -> bool:
    """Whether everything in ``root`` is something kiln writes (so marking it is safe)."""
    try:
        for p in root.iterdir():
            if p.name == MARKER or (p.name.startswith(".tmp-") and p.is_file()):
                continue
            if p.name in KNOWN_DIRS and p.is_dir() and not p.is_symlink():
                continue
            if not is_kind_dir(p):
                return False
    except OSError:
        return False
    return True


def _mark(root: Path) -> None:
    """Write the marker of a root kiln may treat as its own, if it has none."""
    marker = root / MARKER
    if marker.exists():
        return
    if looks_like_kiln(root):
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        except OSError:  # a read-only root: it is still usable for reading
            return
        with os.fdopen(fd, "wb") as f:
            f.write(_MARKER_TEXT)
    else:
        _warn_once(f"unmarked:{root}",
                   f"kiln cache dir {root} holds files kiln did not write: it is used, but not marked as a "
                   f"kiln cache ({MARKER}), so `kiln cache clear` will refuse it")


def _fallback_problem(path: Path) -> str | None:
    try:
        st = os.lstat(path)  # a symlink planted in /tmp must not redirect the cache
    except OSError as e:
        return f"{path} cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    problem = _dir_problem(path, st)
    if problem:
        return problem
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return _root_problem(path)


def _fallback(asked: Path, why: str) -> Path:
    private = Path(tempfile.gettempdir()) / f"kiln-{os.geteuid()}"
    try:
        private.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise KilnError(f"the kiln cache dir {asked} is unsafe ({why}), and the private fallback {private} "
                        f"cannot be created ({e.strerror}); set KILN_CACHE_DIR to a folder only you can write "
                        f"(or KILN_CPU_CACHE=0)") from None
    problem = _fallback_problem(private)
    if problem:
        raise KilnError(f"the kiln cache dir {asked} is unsafe ({why}), and so is the private fallback "
                        f"({problem}); set KILN_CACHE_DIR to a folder only you can write") from None
    _warn_once(f"unsafe:{asked}", f"kiln cache dir {asked} is unsafe ({why}): using {private} instead")
    _mark(private)
    return private


def _check(asked: Path) -> Path:
    root = Path(os.path.abspath(asked))
    try:
        private_mkdir(root)
    except OSError as e:
        return _fallback(asked, f"cannot be created: {e.strerror}")
    problem = _root_problem(Path(os.path.realpath(root)))
    if problem:
        return _fallback(asked, problem)
    _mark(root)
    return root


def safe_cache_root(root: str | os.PathLike) -> Path:
    """The folder to keep the cache of ``root`` in: ``root`` itself (created
    when missing, marked when kiln may call it its own) when it passes the
    checks of the module docstring, else the private per-user fallback
    (one warning); raises :class:`KilnError` when neither is safe.

    The full check runs once per root and process; later calls only check
    that the folder still exists with a safe owner and mode (one ``stat``).
    """
    asked = os.fspath(root)
    with _lock:
        got = _roots.get(asked)
        if got is not None and _dir_problem(got) is None:
            return got
        got = _roots[asked] = _check(Path(asked))
        return got
