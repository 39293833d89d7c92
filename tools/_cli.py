"""What every kiln command-line tool does around its ``main``: exit codes and errors.

Exit status 0 is success, 1 a user error, 2 a usage error (argparse), 130 an
interrupt, and 70 a kiln bug — and only that:

- a ``KilnError`` is a user error: ``<prog>: error: <message>``, exit 1;
- an ``OSError`` (a file the user named that cannot be read or written, a
  full disk, a closed pipe) is the environment, not kiln: one clean line,
  exit 1;
- ``KeyboardInterrupt`` exits 130 (128 + SIGINT, as a shell reports it);
- any other exception is a kiln bug: one line saying so, exit 70, and the
  traceback only with ``KILN_DEBUG=1``.

No tool shows a user a Python traceback.  :func:`read_text` is how the tools
read a text file or stdin, so bytes that are not UTF-8 are a clean error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from ..errors import KilnError
from ..sources import decode_utf8, read_text  # noqa: F401  (re-exported: the tools read files so)

__all__ = ["decode_utf8", "os_error_message", "read_text", "report_exception", "run_tool"]

EXIT_USER_ERROR = 1
EXIT_INTERNAL_ERROR = 70  # EX_SOFTWARE: a bug in kiln
EXIT_INTERRUPTED = 130


def os_error_message(e: OSError, what: str = "") -> str:
    """One line for an ``OSError``: what failed, on which file, and why."""
    reason = e.strerror or str(e) or type(e).__name__
    name = e.filename if e.filename is not None else None
    subject = f"{what} '{name}'" if what and name is not None else (f"'{name}'" if name is not None else what)
    return f"{subject}: {reason}" if subject else reason


def _quiet_broken_pipe() -> None:
    """After EPIPE on stdout (``kiln-opt big.mlir | head``): send what is
    still buffered nowhere, so interpreter shutdown does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def report_exception(prog: str, e: BaseException) -> int:
    """Tell the user about ``e`` raised by ``prog``'s main (one line on
    stderr) and return the exit status it means (see the module docstring)."""
    if isinstance(e, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(e, KilnError):
        sys.stderr.write(f"{prog}: error: {e}\n")
        return EXIT_USER_ERROR
    if isinstance(e, BrokenPipeError):
        # The reader went away: as for any Unix filter, not worth a message,
        # but not success either.
        _quiet_broken_pipe()
        return EXIT_USER_ERROR
    if isinstance(e, OSError):
        # A file the user named (or the disk, or a permission): not a bug.
        sys.stderr.write(f"{prog}: error: {os_error_message(e)}\n")
        return EXIT_USER_ERROR
    # A kiln bug: one line, not a traceback.
    sys.stderr.write(
        f"{prog}: internal error: {type(e).__name__}: {e}\n"
        "(this is a bug in kiln; set KILN_DEBUG=1 for the traceback)\n"
    )
    return EXIT_INTERNAL_ERROR


def add_runtime_arguments(parser, verbose: bool = False) -> None:
    """``--threads N`` (the native pool's size, :mod:`kiln.options`'
    ``threads``) and, with ``verbose``, ``-v`` / ``-vv`` (the ``kiln``
    logger at INFO / DEBUG on stderr) on ``parser``; :func:`apply_runtime_arguments`
    applies them."""
    parser.add_argument("--threads", type=int, metavar="N",
                        help="threads of kiln's native pool (default: KILN_THREADS, else every CPU the process may use)")
    if verbose:
        parser.add_argument("-v", "--verbose", action="count", default=0,
                            help="log compile stages, cache hits and fallbacks on stderr (-vv: debug)")


def apply_runtime_arguments(args) -> None:
    """Apply :func:`add_runtime_arguments`' flags: ``--threads`` sets the
    process's pool size (a bad count is a KilnError naming it), ``-v`` the log level."""
    from ..options import configure, configure_logging

    if getattr(args, "verbose", 0):
        configure_logging("debug" if args.verbose > 1 else "info")
    if args.threads is not None:
        configure(threads=args.threads)


def _debug() -> bool:
    """The ``debug`` option (``KILN_DEBUG=1``); read while an error is being
    reported, so a malformed option reads as off here."""
    from ..options import current

    try:
        return current().debug
    except KilnError:
        return False


def run_tool(prog: str, main: Callable[[], int]) -> None:
    """Run ``main`` as the console script ``prog`` and exit with its status."""
    try:
        status = main()
    except (Exception, KeyboardInterrupt) as e:
        code = report_exception(prog, e)
        if code == EXIT_INTERNAL_ERROR and _debug():
            raise
        sys.exit(code)
    sys.exit(status)
