"""Compiling kiln's native library, and checking a built one before it is loaded.

:func:`compile_library` runs the C compiler once per source (up to ``jobs``
at a time, so a two-core machine builds in about half the time of one
``cc`` over every file) and once more to link, each run in its own process
group: on a timeout, an error or an interrupt the whole group is killed, so
no ``cc1`` or ``as`` outlives the build.  The library is written under a
temporary name with a sidecar digest (``<library>.sha256``, see
:mod:`kiln.runtime.digest`) and moved into place; :func:`verify` checks a file against its sidecar
before anything ``dlopen``\\ s it (a truncated library is a SIGBUS in every
process that maps it, flipped bytes a SIGSEGV or SIGILL).

A failed build leaves a ``<library>.failed`` marker with the compiler's error,
so that each new process does not start the same failing compile again
(:func:`recent_failure`); ``kiln build-native`` ignores it and retries.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ...errors import KilnError
from ..digest import digest_path, digest_problem, write_digest

__all__ = ["compile_library", "lock", "record_failure", "recent_failure", "remove", "verify"]

#: A failed build is not retried by a new process for this long (seconds).
FAILED_RETRY_S = 3600.0
#: How often a build still running says so (seconds).
PROGRESS_EVERY_S = 15.0


def failed_marker(path: Path) -> Path:
    """The marker a failed build of ``path`` leaves."""
    return path.with_name(path.name + ".failed")


def verify(path: Path) -> str | None:
    """None if ``path`` is whole (its size and sha256 are its sidecar
    digest's, :mod:`kiln.runtime.digest`); otherwise what is wrong with it,
    as words that follow its name."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "is missing"
    if size == 0:
        return "is empty"
    problem = digest_problem(path)
    return None if problem is None else f"does not match its digest ({problem})"


def remove(path: Path) -> None:
    """Delete a library and its sidecar, whichever exist."""
    for p in (path, digest_path(path)):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


@contextlib.contextmanager
def lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``<path>.lock`` across processes: one builds,
    the others wait and then find its library (no lock where the folder
    cannot be written)."""
    import fcntl

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a folder that cannot be written: nothing will be built there to race on
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def record_failure(path: Path, error: str) -> None:
    """Leave the marker of a failed build (best effort: a read-only folder keeps none)."""
    with contextlib.suppress(OSError):
        failed_marker(path).write_text(json.dumps({"time": time.time(), "error": error}))


def recent_failure(path: Path) -> str | None:
    """The error of a build of ``path`` that failed less than :data:`FAILED_RETRY_S` ago, else None."""
    try:
        record = json.loads(failed_marker(path).read_text())
        age = time.time() - float(record["time"])
        error = str(record["error"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not 0 <= age < FAILED_RETRY_S:
        return None
    return f"its build failed {age / 60:.0f} min ago (`kiln build-native` retries): {error}"


def _kill(proc: subprocess.Popen) -> None:
    """Kill the process group ``proc`` leads (the compiler driver and its cc1/as/ld) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def compile_library(cc: str, flags: Sequence[str], sources: Sequence[Path], out: Path, *, timeout: float,
                    jobs: int = 1, progress: Callable[[str], None] | None = None) -> float:
    """Compile ``sources`` into the shared library ``out`` with its sidecar;
    returns the seconds it took.

    Each source is compiled with ``cc <flags> -c`` (``jobs`` at a time), then
    linked with ``cc <flags>``: the same library one ``cc <flags> -o out
    <sources>`` gives.  Raises :class:`KilnError` with the compiler's output
    if a step fails, or if the whole build takes more than ``timeout``
    seconds (every process group still running is killed first)."""
    say = progress or (lambda _msg: None)
    start = time.monotonic()
    deadline = start + timeout
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    running: dict[subprocess.Popen, tuple[str, Path]] = {}
    last_note = start

    def spawn(args: list[str], what: str) -> None:
        log = work / f"{len(running)}-{time.monotonic_ns()}.log"
        with open(log, "wb") as f:
            # A session of its own: the group id is the driver's pid, and cc1/as/ld join it.
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        running[proc] = (what, log)

    def wait_all(limit: int) -> None:
        """Wait until fewer than ``limit`` steps run; raise on a failed step or the deadline."""
        nonlocal last_note
        while len(running) >= limit and running:
            for proc in [p for p in running if p.poll() is not None]:
                what, log = running.pop(proc)
                text = log.read_text(errors="replace").strip()
                if proc.returncode != 0:
                    raise KilnError(f"building the native library: {cc} failed on {what} "
                                    f"(exit {proc.returncode}):\n{text[-4000:]}")
                say(f"  {what}: done ({time.monotonic() - start:.0f} s)")
            if len(running) < limit or not running:
                break
            now = time.monotonic()
            if now > deadline:
                names = ", ".join(what for what, _ in running.values())
                raise KilnError(f"building the native library timed out after {timeout:g} s "
                                f"(still compiling {names}); killed the compiler. Retry with a longer "
                                "timeout: kiln build-native --timeout SECONDS")
            if now - last_note >= PROGRESS_EVERY_S:
                say(f"  ... still compiling ({now - start:.0f} s)")
                last_note = now
            time.sleep(0.05)

    tmp = work / out.name
    try:
        objects = []
        for i, src in enumerate(sources):
            obj = work / f"{i}-{src.stem}.o"
            objects.append(str(obj))
            wait_all(max(1, jobs))
            spawn([cc, *flags, "-c", str(src), "-o", str(obj)], src.name)
        wait_all(1)
        spawn([cc, *flags, "-o", str(tmp), *objects], "link")
        wait_all(1)
        if not tmp.exists() or tmp.stat().st_size == 0:
            raise KilnError(f"building the native library: {cc} wrote no library")
        # The sidecar first: a reader that finds the new library finds its digest.
        write_digest(out, data=tmp.read_bytes())
        os.replace(tmp, out)
        with contextlib.suppress(FileNotFoundError):
            failed_marker(out).unlink()
    except OSError as e:
        raise KilnError(f"building the native library into {out.parent}: {e}") from None
    finally:
        for proc in running:
            _kill(proc)
        for p in work.iterdir() if work.exists() else ():
            p.unlink()
        with contextlib.suppress(OSError):
            work.rmdir()
    return time.monotonic() - start
