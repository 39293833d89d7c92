"""Progress of a compile: the stage it is in, and a progress line for the tools.

:func:`kiln.compile` (and the importers) announce each stage they enter with
:func:`stage` -- ``export``, ``import``, ``conversion to kiln``, ``graph
passes``, ``partition``, ``lowering 3/7`` (with the kernel count), ``LLVM``.
That costs nothing while nobody listens.  The command-line tools listen with
a :class:`ProgressLine`: once a compile has run longer than
:data:`DELAY_S` seconds it shows ``kiln-compile: compiling: lowering 4/7
(kiln-cpu-vectorize, 40 kernels) 6 s`` on stderr -- one line updated in
place when stderr is a terminal, else a line every :data:`INTERVAL_S`
seconds -- and clears it when the compile ends.  A compile shorter than the
delay shows nothing.  The stage times themselves go to the ``kiln.compile``
logger at INFO (``kiln-compile -v``, ``KILN_LOG=info``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

__all__ = ["DELAY_S", "INTERVAL_S", "ProgressLine", "StageClock", "format_stages", "listening", "stage"]

#: Seconds a compile runs before a progress line appears.
DELAY_S = 2.0
#: Seconds between two progress lines when stderr is not a terminal.
INTERVAL_S = 5.0

_lock = threading.Lock()
_listeners: list[Callable[[str], None]] = []


def stage(name: str, done: int | None = None, total: int | None = None, detail: str = "") -> None:
    """Announce that the compile entered stage ``name`` (``done``/``total``
    when it is one of several steps; ``detail`` a short note, e.g. the
    kernel count) to every listener (:func:`listening`)."""
    if not _listeners:  # the common case: no tool is showing progress
        return
    text = name + (f" {done}/{total}" if done is not None and total is not None else "")
    text += f" ({detail})" if detail else ""
    with _lock:
        listeners = list(_listeners)
    for fn in listeners:
        fn(text)


class listening:  # noqa: N801 - used as a context manager, like contextlib's
    """``with listening(fn):`` calls ``fn(text)`` for each :func:`stage`
    announced (from any thread) until the block ends."""

    def __init__(self, fn: Callable[[str], None]):
        self.fn = fn

    def __enter__(self):
        with _lock:
            _listeners.append(self.fn)
        return self

    def __exit__(self, *exc) -> None:
        with _lock:
            _listeners.remove(self.fn)


def _stage_name(text: str) -> str:
    """The stage of an announcement: ``lowering 3/7 (kiln-cpu-vectorize, 40 kernel(s))`` -> ``lowering``."""
    return re.sub(r" \d+/\d+$", "", text.split(" (", 1)[0])


class StageClock:
    """Seconds spent in each stage of one compile: ``with StageClock() as
    clock:`` around it, then ``clock.seconds`` (``{stage: seconds}`` in the
    order entered; a stage entered twice, ``import`` around ``export``, sums;
    ``lowering 3/7`` counts as ``lowering``).  Announcements from other
    threads (another compile) are not counted.  ``clock`` as for
    :class:`ProgressLine`."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.seconds: dict[str, float] = {}
        self._clock = clock
        self._thread: int | None = None  # the compiling thread, from __enter__
        self._current: str | None = None
        self._since = 0.0
        self._listening = listening(self._announced)

    def _announced(self, text: str) -> None:
        if threading.get_ident() == self._thread:
            self._enter(_stage_name(text))

    def _enter(self, name: str | None) -> None:
        now = self._clock()
        if self._current is not None:
            self.seconds[self._current] = self.seconds.get(self._current, 0.0) + now - self._since
        self._current, self._since = name, now

    def __enter__(self) -> StageClock:
        self._thread = threading.get_ident()
        self._listening.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._listening.__exit__(*exc)
        self._enter(None)


def format_stages(seconds: dict[str, float]) -> str:
    """``export 11.5 s, import 1.2 s, ...`` (``-`` when there are none)."""
    return ", ".join(f"{name} {s:.3f} s" for name, s in seconds.items()) or "-"


class ProgressLine:
    """The progress line of a tool's compile (see the module docstring).

    ``stream`` is where it writes (stderr); ``verb`` what the line says the
    tool is doing (``compiling``, ``importing``); ``enabled=False`` (``-q``) makes
    it show nothing; ``delay`` and ``interval`` default to :data:`DELAY_S`
    and :data:`INTERVAL_S` as they are when the line starts; ``clock`` is
    ``time.monotonic`` (tests pass a fake one).  A background thread redraws
    the line every ``tick`` seconds so the elapsed time moves during a long
    stage; a stage change redraws it at once.
    """

    def __init__(self, prog: str, stream=None, *, verb: str = "compiling", enabled: bool = True,
                 delay: float | None = None,
                 interval: float | None = None, clock: Callable[[], float] = time.monotonic, tick: float = 0.5):
        import sys

        self.prog = prog
        self.verb = verb
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.delay = DELAY_S if delay is None else delay
        self.interval = INTERVAL_S if interval is None else interval
        self.clock = clock
        self.tick_s = tick
        isatty = getattr(self.stream, "isatty", None)
        try:
            self.tty = bool(isatty()) if callable(isatty) else False
        except (OSError, ValueError):  # a closed or odd stream
            self.tty = False
        self._lock = threading.Lock()
        self._stage = "starting"
        self._start = 0.0
        self._last: float | None = None  # when the last line was written
        self._shown = False  # a terminal line is on screen
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listening: listening | None = None

    def __enter__(self) -> ProgressLine:
        if not self.enabled:
            return self
        self._start = self.clock()
        self._listening = listening(self.update).__enter__()
        if self.tick_s > 0:
            self._thread = threading.Thread(target=self._run, name="kiln-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self.enabled:
            return
        self._listening.__exit__(*exc)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._shown:  # leave the terminal as it was: the tool prints its own last line
                self._write("\r\x1b[K")
                self._shown = False

    def update(self, text: str) -> None:
        """The compile entered stage ``text``: redraw (past the delay)."""
        with self._lock:
            self._stage = text
            self._draw()

    def tick(self) -> None:
        """Redraw the line with the time elapsed (what the thread calls)."""
        with self._lock:
            self._draw()

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()

    def _draw(self) -> None:
        now = self.clock()
        elapsed = now - self._start
        if elapsed < self.delay:
            return
        line = f"{self.prog}: {self.verb}: {self._stage} {elapsed:.0f} s"
        if self.tty:
            self._write(f"\r{line}\x1b[K")
            self._shown = True
        elif self._last is None or now - self._last >= self.interval:
            self._write(line + "\n")
        else:
            return
        self._last = now

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr closed under us: progress is not worth an error
            pass
