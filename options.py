"""kiln's settings: one typed, documented :class:`Options` object.

Every setting is a field of :class:`Options` with its default; an
environment variable (``KILN_THREADS``, ``KILN_PIN``, ...) overrides the
default, and an explicit keyword overrides the variable::

    kiln.compile(model, args, threads=2)        # the pool's size for the process
    kiln.options.configure(winograd=False)       # process-wide, before the first compile
    with kiln.options.using(fast=False): ...     # within the block, this thread only
    kiln.options.current()                       # what kiln reads now

:func:`current` is what kiln's code reads: the defaults, overridden by the
environment, by :func:`configure`'s process-wide keywords, then by
:func:`using`'s (``kiln.compile``'s per-compile keywords).  A malformed
value is a :class:`~kiln.errors.KilnError` naming the variable or keyword
and the value (``KILN_PIN must be 0 or 1, got 'maybe'``).

Some settings are read once per process (the native library's switches,
read when it loads; the launch switches, at the first call): changing one
with :func:`configure` after it was read is a KilnError saying so.  The
settings that change generated code (``when == "codegen"``) are part of the
kernel cache key; runtime-only ones (threads, pinning, debug, logging, ...)
are not.  :func:`markdown_table` renders the README's table of them
(``python -m kiln.tools.options_table`` rewrites it, ``--check`` checks it).

Logging: kiln logs on the ``kiln`` logger (``kiln.compile`` for stages and
their times, ``kiln.cache`` for kernel cache hits and misses, ``kiln.native``
for the native library's build, ``kiln.runtime`` for specializations
compiled at run time, fallbacks as a WARNING).  Unconfigured, only warnings
and errors reach stderr (Python's last-resort handler); ``KILN_LOG=info``
(or ``log="info"``, ``kiln-compile -v``) adds a stderr handler at that
level, and any ``logging`` configuration of the ``kiln`` logger works too.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import operator
import os
import sys
import threading
from dataclasses import dataclass, field

from .errors import KilnError

__all__ = ["Options", "Setting", "compile_keywords", "configure", "configure_logging", "current", "markdown_table",
           "parse_bytes", "read_once", "reset", "settings", "update_readme", "using"]

# --- how each kind of setting is parsed -------------------------------------------------

_LEVELS = ("debug", "info", "warning", "error")
_UNITS = {"": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def _flag(value, label: str, from_env: bool):
    if from_env:
        if value.strip() in ("0", "1"):
            return value.strip() == "1"
        raise KilnError(f"{label} must be 0 or 1, got {value!r}")
    if isinstance(value, bool) or (type(value) is int and value in (0, 1)):
        return bool(value)
    raise KilnError(f"{label} must be True or False, got {value!r}")


def _whole(value, from_env: bool):
    """``value`` as an int (text of digits from the environment), or None."""
    if from_env:
        try:
            return int(value.strip())
        except ValueError:
            return None
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # ints and numpy integers, not 1.5
    except TypeError:
        return None


def _threads(value, label: str, from_env: bool):
    n = _whole(value, from_env)
    if n is None or n < 1:
        raise KilnError(f"{label}={value!r} is not a positive whole number of threads "
                        "(unset it to use every CPU this process may use)")
    return n


def _blas_threads(value, label: str, from_env: bool):
    n = _whole(value, from_env)
    if n is None:
        raise KilnError(f"{label}={value!r} is not a whole number of threads "
                        "(unset it to use OpenBLAS's own count)")
    return max(1, n)  # at least one thread, as OpenBLAS takes it


def _count(value, label: str, from_env: bool):
    n = _whole(value, from_env)
    if n is None or n < 0:
        raise KilnError(f"{label} must be a whole number >= 0, got {value!r}")
    return n


def _seconds(value, label: str, from_env: bool):
    try:
        seconds = float(value) if not isinstance(value, bool) else 0.0
    except (TypeError, ValueError):
        seconds = 0.0
    if not seconds > 0:
        raise KilnError(f"{label}={value!r} is not a positive number of seconds")
    return seconds


def parse_bytes(value, label: str):
    """A byte count from ``value``: an int >= 0, or text such as ``"512M"`` /
    ``"2GiB"`` (binary units).  Anything else is a KilnError naming ``label``
    and the value."""
    if isinstance(value, bool):
        raise KilnError(f"{label} must be a number of bytes, got {value!r}")
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(digits):]
        if not digits.isdigit() or unit not in _UNITS:
            raise KilnError(f"{label} must be a number of bytes (e.g. 268435456 or '256M'), got {value!r}")
        return int(digits) * _UNITS[unit]
    try:
        n = operator.index(value)
    except TypeError:
        raise KilnError(f"{label} must be a number of bytes, got {value!r}") from None
    if n < 0:
        raise KilnError(f"{label} must be >= 0, got {n}")
    return n


def _bytes(value, label: str, from_env: bool):
    return parse_bytes(value, label)


def _path(value, label: str, from_env: bool):
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise KilnError(f"{label} must be a path, got {value!r}")


def _level(value, label: str, from_env: bool):
    if isinstance(value, str) and value.strip().lower() in _LEVELS:
        return value.strip().lower()
    raise KilnError(f"{label} must be one of {', '.join(_LEVELS)}, got {value!r}")


_PARSERS = {"flag": _flag, "threads": _threads, "blas_threads": _blas_threads, "count": _count,
            "seconds": _seconds, "bytes": _bytes, "path": _path, "level": _level}

# --- the settings ---------------------------------------------------------------------

#: When a setting is read, as the README table says it.
WHEN = {
    "codegen": "each compile; in the kernel cache key",
    "compile": "each compile",
    "pool": "runtime, process-wide: `kiln.compile(threads=, pin=)` restarts the pool",
    "native": "once per process, when the native library loads",
    "launch": "once per process, at the first call",
    "build": "when the native library is looked for or built",
    "use": "at each use",
    "process": "when `kiln` is imported, and by `configure`",
}


@dataclass(frozen=True)
class Setting:
    """One field of :class:`Options`: its environment variable, kind of value
    (``flag``, ``threads``, ``count``, ``bytes``, ``seconds``, ``path``,
    ``level``), default, when kiln reads it (a key of :data:`WHEN`) and a
    one-line description; ``compile_keyword``: ``kiln.compile`` takes it."""

    name: str
    env: str
    kind: str
    default: object
    when: str
    doc: str
    default_text: str = ""
    compile_keyword: bool = False

    def parse_env(self, text: str):
        """The value of the variable's ``text`` (a KilnError naming the variable when malformed)."""
        return _PARSERS[self.kind](text, self.env, True)

    def check(self, value):
        """``value`` given as a keyword, checked and normalized (None keeps a None default)."""
        if value is None and self.default is None:
            return None
        return _PARSERS[self.kind](value, self.name, False)


def _s(name, env, kind, default, when, doc, default_text="", compile_keyword=False):
    return Setting(name, env, kind, default, when, doc, default_text, compile_keyword)


#: Every setting, in the README table's order.
SETTINGS = (
    _s("threads", "KILN_THREADS", "threads", None, "pool",
       "threads of kiln's native pool (the caller included); `report()['threads']` shows the pool's size",
       "the CPUs this process may use", True),
    _s("pin", "KILN_PIN", "flag", False, "pool",
       "bind each pool worker to one CPU (only when the pool has as many threads as the process has CPUs; "
       "a worker found on the caller's CPU moves to the free one)", compile_keyword=True),
    _s("blas_threads", "KILN_BLAS_THREADS", "blas_threads", None, "native",
       "threads of the multi-threaded OpenBLAS products the native library runs", "OpenBLAS's own count"),
    _s("native", "KILN_NATIVE", "flag", True, "codegen",
       "use kiln's native runtime library (pool, GEMMs, convolutions); 0: OpenBLAS and generated code only",
       compile_keyword=True),
    _s("native_wa", "KILN_NATIVE_WA", "flag", True, "codegen",
       "products with a constant A, and convolutions, go to the native weight-A GEMM and `kiln_conv2d`",
       compile_keyword=True),
    _s("cpu_library", "KILN_CPU_LIBRARY", "flag", True, "codegen",
       "products go to library GEMMs (OpenBLAS, native); 0 keeps generated code", compile_keyword=True),
    _s("small_m", "KILN_SMALL_M", "count", None, "codegen",
       "the most rows a product with a constant weight runs in the native GEMM (more go to OpenBLAS)",
       "4096 with AVX-512, 96 with AVX2", True),
    _s("blas_mt_mnk", "KILN_BLAS_MT_MNK", "count", 1 << 22, "codegen",
       "multiply-adds (M x N x K) from which an OpenBLAS product runs on several threads", compile_keyword=True),
    _s("inline_limit", "KILN_INLINE_LIMIT", "bytes", 64, "compile",
       "largest constant (bytes, e.g. `4M`) copied into the kernels that read it; larger ones stay in memory "
       "the runtime passes (kiln-partition's `inline-limit`)", "64 B", True),
    _s("fast", "KILN_FAST", "flag", True, "compile",
       "a repeated input shape takes its frozen dispatch plan (`kiln.runtime.fastcall`)", compile_keyword=True),
    _s("reshape_views", "KILN_RESHAPE_VIEWS", "flag", True, "compile",
       "reshapes and slices of leading rows run as views of their input; 0 copies them", compile_keyword=True),
    _s("verify_each", "KILN_VERIFY_EACH", "flag", False, "compile",
       "verify the IR after every pass (naming the pass that broke it), not once at the end",
       compile_keyword=True),
    _s("cpu_cache", "KILN_CPU_CACHE", "flag", True, "compile",
       "cache compiled kernels on disk (a second compile skips lowering and LLVM)", compile_keyword=True),
    _s("cache_dir", "KILN_CACHE_DIR", "path", None, "use",
       "the kernel cache's root (`kiln cache info`, `kiln cache clear`)", "`$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`", True),
    _s("arena_pool_bytes", "KILN_ARENA_POOL_BYTES", "bytes", None, "compile",
       "bytes of arenas kept between calls, e.g. `512M` (also `kiln.compile(arena_pool_bytes=)`)",
       "twice the largest arena, at least 32 MiB"),
    _s("split", "KILN_SPLIT", "flag", True, "launch",
       "row-independent kernels run as two halves of their leading dim on two threads"),
    _s("seq", "KILN_SEQ", "flag", True, "launch",
       "a run of generated kernels is launched in one native call; 0: one ctypes call each"),
    _s("split_seq", "KILN_SPLIT_SEQ", "flag", True, "launch",
       "a run of split kernels runs each half on one thread, one pool handoff for the run"),
    _s("hugepages", "KILN_HUGEPAGES", "flag", True, "native",
       "packed weights and large arenas in 2 MiB pages (arenas read it at each allocation)"),
    _s("winograd", "KILN_WINOGRAD", "flag", True, "native",
       "3x3 stride-1 convolutions by Winograd's F(2x2, 3x3) where the layer is large enough"),
    _s("conv_pair", "KILN_CONV_PAIR", "flag", True, "native",
       "a small CNN's last two convolutions in one call, the intermediate in the thread's cache"),
    _s("vconv_unpadded", "KILN_VCONV_UNPADDED", "flag", True, "native",
       "AVX-512 stride-2 3x3 channel-vector tiles read the input itself, not a zero-padded copy"),
    _s("gemv", "KILN_GEMV", "flag", True, "native",
       "products of up to 4 rows against a weight with no packing slot on the native GEMV, not OpenBLAS"),
    _s("malloc_tune", "KILN_MALLOC_TUNE", "flag", True, "native",
       "freed memory kept by malloc (fixed 32 MiB mmap threshold, no trimming): kernel temporaries reuse "
       "resident pages instead of faulting in fresh ones every call"),
    _s("native_dir", "KILN_NATIVE_DIR", "path", None, "build",
       "where the native library is built and looked for",
       "`runtime/native/build`, else the cache's `native/`"),
    _s("native_build", "KILN_NATIVE_BUILD", "flag", True, "build",
       "build the native library on first use when it is missing (`kiln build-native` builds it ahead)"),
    _s("native_build_timeout", "KILN_NATIVE_BUILD_TIMEOUT", "seconds", 600.0, "build",
       "seconds a build of the native library may take before it is killed"),
    _s("log", "KILN_LOG", "level", None, "process",
       "log level of a stderr handler on the `kiln` logger: debug, info, warning, error",
       "none: warnings only"),
    _s("debug", "KILN_DEBUG", "flag", False, "use",
       "command-line tools print the traceback of an internal error"),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def settings() -> tuple[Setting, ...]:
    """Every :class:`Setting`, in the README table's order."""
    return SETTINGS


@dataclass(frozen=True)
class Options:
    """kiln's settings (see the module docstring and the README table).

    Construct with keywords (checked: a bad value is a KilnError naming the
    field), or with :meth:`from_env`, where the environment overrides the
    defaults and the keywords override the environment.  ``None`` in a field
    whose default is None means automatic (threads: the CPUs this process
    may use; small_m: by the native library's vector width; cache_dir: the
    user cache dir; log: no handler)."""

    threads: int | None = None
    pin: bool = False
    blas_threads: int | None = None
    native: bool = True
    native_wa: bool = True
    cpu_library: bool = True
    small_m: int | None = None
    blas_mt_mnk: int = 1 << 22
    inline_limit: int = 64
    fast: bool = True
    reshape_views: bool = True
    verify_each: bool = False
    cpu_cache: bool = True
    cache_dir: str | None = None
    arena_pool_bytes: int | None = None
    split: bool = True
    seq: bool = True
    split_seq: bool = True
    hugepages: bool = True
    winograd: bool = True
    conv_pair: bool = True
    vconv_unpadded: bool = True
    gemv: bool = True
    malloc_tune: bool = True
    native_dir: str | None = None
    native_build: bool = True
    native_build_timeout: float = 600.0
    log: str | None = None
    debug: bool = False
    #: Where each field's value came from: "default", "env" or "keyword" (not compared).
    sources: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        for s in SETTINGS:
            value = getattr(self, s.name)
            if value != s.default or type(value) is not type(s.default):
                object.__setattr__(self, s.name, s.check(value))

    @classmethod
    def from_env(cls, env=None, **overrides) -> Options:
        """The options of the environment (``env``, default ``os.environ``)
        with ``overrides`` (field keywords) on top.  A variable that is unset
        or empty keeps the default; a keyword skips its variable altogether."""
        env = os.environ if env is None else env
        unknown = set(overrides) - set(_BY_NAME)
        if unknown:
            raise KilnError(f"unknown kiln option(s): {', '.join(sorted(unknown))} "
                            f"(options: {', '.join(_BY_NAME)})")
        values, sources = {}, {}
        for s in SETTINGS:
            if s.name in overrides:
                values[s.name], sources[s.name] = s.check(overrides[s.name]), "keyword"
                continue
            text = env.get(s.env)
            if text is not None and text.strip():
                values[s.name], sources[s.name] = s.parse_env(text), "env"
            else:
                sources[s.name] = "default"
        return cls(**values, sources=sources)

    def changed(self) -> dict:
        """The fields that differ from their defaults, ``{name: value}``."""
        return {s.name: getattr(self, s.name) for s in SETTINGS if getattr(self, s.name) != s.default}


# --- the options in force ----------------------------------------------------------

_lock = threading.Lock()
#: configure()'s keywords, process-wide.
_process: dict = {}
#: using()'s keywords (kiln.compile's per-compile ones), this context only.
_scoped: contextvars.ContextVar[tuple] = contextvars.ContextVar("kiln_options", default=())
#: Settings read once per process: name -> the value read (see read_once()).
_frozen: dict = {}
_cache: dict = {}


def current() -> Options:
    """The options in force here and now: defaults, the environment,
    :func:`configure`'s keywords, then :func:`using`'s.  Read again when the
    environment changes (a test may set a variable for one compile), cached
    otherwise (a few microseconds)."""
    scoped = _scoped.get()
    key = (tuple(os.environ.get(s.env) for s in SETTINGS), tuple(_process.items()), scoped)
    found = _cache.get(key)
    if found is None:
        found = Options.from_env(**{**_process, **dict(scoped)})
        if len(_cache) > 16:
            _cache.clear()
        _cache[key] = found
    return found


def read_once(name: str, value):
    """Record that setting ``name`` was read as ``value`` once for this
    process (a later :func:`configure` of another value is a KilnError);
    returns ``value``."""
    _frozen.setdefault(name, value)
    return value


def configure(**overrides) -> Options:
    """Set options for the whole process (field keywords; they override the
    environment) and return the options in force.

    ``threads`` and ``pin`` resize or rebind the native pool when it is
    running already; ``log`` installs the stderr handler at once.  A
    setting read once per process (the native library's switches, the
    launch switches, ``blas_threads``) cannot change after it was read: a
    KilnError says so."""
    if not overrides:
        return current()
    with _lock:
        merged = {**_process, **overrides}
        checked = Options.from_env(**merged)  # every value checked before anything changes
        for name in overrides:
            if name in _frozen and getattr(checked, name) != _frozen[name]:
                s = _BY_NAME[name]
                raise KilnError(f"{name} is read {WHEN[s.when]} and was {_frozen[name]!r}: it cannot become "
                                f"{getattr(checked, name)!r} in this process (set {s.env} or configure "
                                f"{name}= before the first compile)")
        _process.update({name: getattr(checked, name) for name in overrides})
    if "log" in overrides:
        configure_logging()
    if {"threads", "pin"} & set(overrides):
        # A pool runs only once the runtime has loaded the native library, so
        # an unimported runtime has nothing to resize (it starts the pool from
        # these options); looked up, not imported: options sit below the runtime.
        native = sys.modules.get("kiln.runtime.native")
        if native is not None:
            native.start_pool()
    return current()


def reset(*names: str) -> None:
    """Drop :func:`configure`'s keywords ``names`` (all of them when none is
    given): the environment and the defaults apply again.  The native pool
    keeps its size until the next compile or :func:`configure`."""
    with _lock:
        for name in names or list(_process):
            _process.pop(name, None)


@contextlib.contextmanager
def using(**overrides):
    """Within the block, in this thread (context) only, these field keywords
    override everything else (``kiln.compile``'s per-compile options)."""
    for name, value in overrides.items():
        if name not in _BY_NAME:
            raise KilnError(f"unknown kiln option '{name}' (options: {', '.join(_BY_NAME)})")
        _BY_NAME[name].check(value)
    token = _scoped.set(tuple(sorted({**dict(_scoped.get()), **overrides}.items())))
    try:
        yield current()
    finally:
        _scoped.reset(token)


def compile_keywords() -> frozenset[str]:
    """The settings ``kiln.compile`` takes as keywords."""
    return frozenset(s.name for s in SETTINGS if s.compile_keyword)


# --- logging ----------------------------------------------------------------------------

_handler: logging.Handler | None = None


def configure_logging(level: str | int | None = None) -> None:
    """Show the ``kiln`` logger's records at ``level`` (a name of
    ``debug|info|warning|error`` or a ``logging`` level; default the
    ``log`` option, i.e. ``KILN_LOG``) on stderr, through one handler kiln
    owns (installed once, its level updated; the kiln logger's records then
    stop there instead of also reaching the root's handlers).  With no
    level set, nothing is installed: warnings still reach stderr through
    Python's last-resort handler, and anything below is dropped.  (No
    ``NullHandler`` either: it would count as a handler and silence those
    warnings too.)"""
    global _handler
    if level is None:
        level = current().log
        if level is None:
            return
    if isinstance(level, str):
        level = _level(level, "log", False).upper()
    logger = logging.getLogger("kiln")
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
        logger.addHandler(_handler)
        # Not also to the root's handlers: a library that calls logging.info()
        # on the root configures one, and every line would print twice.
        logger.propagate = False
    _handler.setLevel(level)
    logger.setLevel(level)


def _configure_logging_at_import() -> None:
    """``KILN_LOG`` at ``import kiln``; a malformed value is reported by the
    first read of the options (a KilnError), not by the import."""
    try:
        configure_logging()
    except KilnError:
        pass


# --- the README table ----------------------------------------------------------------------

TABLE_BEGIN = "<!-- options table: python -m kiln.tools.options_table -->"
TABLE_END = "<!-- end of options table -->"


def _default_text(s: Setting) -> str:
    if s.default_text:
        return s.default_text
    if s.kind == "flag":
        return "1" if s.default else "0"
    if isinstance(s.default, float) and s.default.is_integer():
        return str(int(s.default))
    return str(s.default)


def markdown_table() -> str:
    """The README's table of settings (option, variable, default, when it is
    read, what it does), between its markers."""
    rows = [TABLE_BEGIN, "",
            "| option | variable | default | read | what it does |",
            "|---|---|---|---|---|"]
    for s in SETTINGS:
        keyword = f"`{s.name}`" + (" *" if s.compile_keyword else "")
        rows.append(f"| {keyword} | `{s.env}` | {_default_text(s)} | {WHEN[s.when]} | {s.doc} |")
    rows += ["", "\\* also a `kiln.compile` keyword (for that compile; `threads` and `pin` for the process). "
             "Flags are `0` or `1`; an empty variable is unset.", "", TABLE_END]
    return "\n".join(rows)


def update_readme(path, write: bool = True) -> bool:
    """Rewrite the table between the markers of the file ``path`` (only
    compare it when not ``write``); True when it changed (or would)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if start < 0 or end < start:
        raise KilnError(f"{path} has no options table markers ({TABLE_BEGIN!r} ... {TABLE_END!r})")
    new = text[:start] + markdown_table() + text[end + len(TABLE_END):]
    if new != text and write:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text
