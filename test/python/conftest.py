"""Shared pytest fixtures: a kiln context per test (one context owns everything a test touches),
and the rule for tests that need kiln's native library or a C compiler.

Tests marked ``native`` (the library ``kiln build-native`` / ``scripts/setup.sh``
built) or ``cc`` (a C compiler: setup needs one to build that library) FAIL
when it is missing on an x86 host, with a message saying how to build it:
a skip would make a run that tested nothing native look green.  They skip
only where the library cannot exist (a host that is not x86) or was turned
off for the whole run (``KILN_NATIVE=0``).  The summary says how many native
tests ran.
"""

import os
import tempfile

import pytest

from kiln._mlir import ir
from kiln.bench.torchvision_compat import define_torchvision_schemas
from kiln.context import make_context

# Before anything imports torchvision (transformers does): see kiln.bench.torchvision_compat.
define_torchvision_schemas()

# Compiled kernels go to a cache of this session, not the user's
# (~/.cache/kiln): tests see cold caches and leave nothing behind.
os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-test-cache-"))
# The native library is the one setup built (kiln build-native): a test run
# never compiles it on first use, so a missing one fails the native tests
# at once instead of costing a minute of cc in whichever test comes first.
os.environ.setdefault("KILN_NATIVE_BUILD", "0")

SETUP_HINT = "run `kiln build-native` (scripts/setup.sh runs it) to build it for this machine"

_state: dict = {}
_counts = {"passed": 0, "failed": 0, "skipped": 0}


def _native_status() -> tuple[str, str | None]:
    """("ok", path), ("skip", reason) or ("fail", message), worked out once."""
    if "native" not in _state:
        from kiln.runtime import native

        if os.environ.get("KILN_NATIVE", "1") == "0":
            _state["native"] = ("skip", "KILN_NATIVE=0 for this run: the native library is off")
        elif not native.x86_host():
            _state["native"] = ("skip", native.not_x86_message())
        elif native.load() is None:
            why = native.build_error or "it could not be loaded"
            hint = "" if "kiln build-native" in why else f"; {SETUP_HINT}"
            _state["native"] = ("fail", f"native library missing: {why}{hint}")
        else:
            _state["native"] = ("ok", native.library())
    return _state["native"]


def pytest_runtest_setup(item):
    """Fail (or, where they cannot run here, skip) the native and cc tests before they start."""
    if item.get_closest_marker("native") is not None:
        status, text = _native_status()
        if status == "skip":
            pytest.skip(text)
        if status == "fail":
            pytest.fail(text, pytrace=False)
    if item.get_closest_marker("cc") is not None:
        from kiln.runtime import native

        if native._compiler() is None:
            if not native.x86_host():
                pytest.skip(f"no C compiler on this {os.uname().machine} host")
            pytest.fail("no C compiler (cc, gcc or $CC): scripts/setup.sh needs one to build the native library; "
                        "install gcc", pytrace=False)


def pytest_collection_modifyitems(items):
    """Note which tests are native (by marker: a test id that merely says "native" is not)."""
    _state["ids"] = {item.nodeid for item in items if item.get_closest_marker("native") is not None}


def pytest_runtest_logreport(report):
    """Count the native tests by outcome (a failure in setup counts as a failure)."""
    if report.nodeid not in _state.get("ids", ()):
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _counts["passed" if report.passed else "skipped" if report.skipped else "failed"] += 1


def pytest_terminal_summary(terminalreporter):
    """One line CI logs show: how many native tests ran, and with which library."""
    status, text = _state.get("native", (None, None))
    where = {"ok": f"library {text}", "skip": f"skipped: {text}", "fail": "LIBRARY MISSING"}.get(status, "not needed")
    c = _counts
    terminalreporter.write_line(f"native tests run: {c['passed'] + c['failed']} ({c['passed']} passed, "
                                f"{c['failed']} failed, {c['skipped']} skipped); {where}")


@pytest.fixture
def ctx():
    """A fresh context with the kiln dialect, entered, with an unknown location."""
    context = make_context()
    with context, ir.Location.unknown():
        yield context

