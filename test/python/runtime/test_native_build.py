"""Building and loading kiln's native library: ``kiln build-native``, the build's
time limit (the whole process group killed), the digest checked before
``dlopen`` (a damaged library rebuilt, never loaded), failed builds not
retried by every process, non-x86 hosts, ``KILN_THREADS``, and the test
suite's own rule (native tests fail, not skip, without the library)."""

import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kiln.errors import KilnError
from kiln.runtime import native
from kiln.runtime.digest import digest_path
from kiln.runtime.native import build
from kiln.tools.kiln_main import main as kiln_main

REPO = Path(__file__).resolve().parents[3]


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _fake_cc(tmp_path: Path, link: str, name: str = "fake-cc") -> str:
    """A compiler stand-in: ``-c`` writes an empty object, linking runs ``link``
    (shell, ``$out`` is the library to write); every call is logged to ``calls``."""
    return _script(tmp_path / name, f"""\
        out=""; compile=0
        while [ $# -gt 0 ]; do
          case "$1" in -o) out="$2"; shift;; -c) compile=1;; esac; shift
        done
        echo "$compile" >> "{tmp_path}/calls"
        if [ "$compile" = 1 ]; then : > "$out"; exit 0; fi
        {link}
        """)


def _copying_cc(tmp_path: Path) -> str:
    """A compiler that "builds" by copying the library setup built: a rebuild in a second."""
    return _fake_cc(tmp_path, f'cp "{native.library()}" "$out"')


def _links(tmp_path: Path) -> int:
    calls = tmp_path / "calls"
    return calls.read_text().split().count("0") if calls.exists() else 0


def _env(tmp_path: Path, cc: str, **extra) -> dict:
    """A child's environment: its own library folder (inside its own cache), builds
    allowed, no CPU cache (whose entries would be linked with the fake ``CC``)."""
    env = dict(os.environ, CC=cc, KILN_CACHE_DIR=str(tmp_path / "cache"), KILN_CPU_CACHE="0",
               KILN_NATIVE_DIR=str(tmp_path / "cache" / "native"))
    env.update({"KILN_NATIVE_BUILD": "1", **extra})
    env.pop("KILN_NATIVE", None)
    return env


def _python(code: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout)


# --- KILN_THREADS -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "0", "-3", "1.5"])
def test_kiln_threads_must_be_a_positive_whole_number(monkeypatch, value):
    monkeypatch.setenv("KILN_THREADS", value)
    with pytest.raises(KilnError, match=rf"KILN_THREADS='{value}' is not a positive whole number of threads"):
        native.threads()


def test_kiln_threads_sets_the_pool_size(monkeypatch):
    monkeypatch.setenv("KILN_THREADS", "3")
    assert native.threads() == 3


# --- the build: time limit, errors ---------------------------------------------------


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # killed, not yet reaped by init
    except FileNotFoundError:
        return True


def test_a_build_past_its_time_limit_kills_the_whole_process_group(tmp_path):
    """A compiler that hangs (and whose child, like cc1, hangs too) is killed
    with everything it started: no compiler process outlives the build."""
    cc = _script(tmp_path / "hanging-cc", f"""\
        sleep 300 &
        echo $! > "{tmp_path}/child"
        echo $$ > "{tmp_path}/driver"
        sleep 300
        """)
    src = tmp_path / "a.c"
    src.write_text("int f(void) { return 0; }\n")
    start = time.monotonic()
    with pytest.raises(KilnError, match=r"timed out after 1 s \(still compiling a.c\); killed the compiler"):
        build.compile_library(cc, [], [src], tmp_path / "out" / "lib.so", timeout=1)
    assert time.monotonic() - start < 30
    for name in ("driver", "child"):
        pid = int((tmp_path / name).read_text())
        deadline = time.monotonic() + 10
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid), f"the compiler's {name} (pid {pid}) outlived the build"
    assert list((tmp_path / "out").iterdir()) == []  # no temporary files left


def test_a_failed_compile_reports_the_compilers_error(tmp_path):
    cc = _script(tmp_path / "failing-cc", 'echo "bad.c:1:1: error: boom" >&2; exit 1\n')
    src = tmp_path / "bad.c"
    src.write_text("x\n")
    with pytest.raises(KilnError, match=r"(?s)failing-cc failed on bad.c \(exit 1\):\nbad.c:1:1: error: boom"):
        build.compile_library(cc, ["-O3"], [src], tmp_path / "lib.so", timeout=60)
    assert not (tmp_path / "lib.so").exists()


# --- kiln build-native -------------------------------------------------------------


@pytest.mark.native
def test_build_native_prints_its_progress_and_writes_a_digest(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CC", _copying_cc(tmp_path))
    out = tmp_path / "lib"
    # Builds of other sources: a day-old one goes, a recent one stays (a process may still load it).
    out.mkdir()
    for name, age in (("kiln_native-0ld.so", 2 * 86400), ("kiln_native-rec3nt.so", 60)):
        for path in (out / name, digest_path(out / name)):
            path.write_text("x")
            os.utime(path, (time.time() - age, time.time() - age))
    assert kiln_main(["build-native", "--dir", str(out), "--jobs", "2"]) == 0
    text = capsys.readouterr().out
    assert f"removed 1 older build(s) of other sources from {out}" in text
    assert sorted(p.name for p in out.glob("kiln_native-*")) == sorted([
        "kiln_native-rec3nt.so", "kiln_native-rec3nt.so.sha256", native.library_name(os.environ["CC"]),
        native.library_name(os.environ["CC"]) + ".sha256", native.library_name(os.environ["CC"]) + ".lock"])
    lib = out / native.library_name(os.environ["CC"])
    assert f"building the native library with {os.environ['CC']} -O3 -march=native" in text
    assert f"{len(native.SOURCE_NAMES)} sources from {REPO / 'runtime' / 'native'}, 2 at a time, into {lib}" in text
    assert "  kiln_attention.c: done (" in text and "  link: done (" in text
    assert f"built {lib} in " in text and f"loaded {lib.name}: " in text
    assert build.verify(lib) is None and digest_path(lib).exists()
    # Again: the whole library is kept, not rebuilt.
    assert kiln_main(["build-native", "--dir", str(out)]) == 0
    assert f"the native library is up to date: {lib}" in capsys.readouterr().out
    assert _links(tmp_path) == 1


def test_build_native_fails_with_the_compilers_error(tmp_path):
    cc = _script(tmp_path / "failing-cc", 'echo "kiln_native.c:9: error: no such intrinsic" >&2; exit 1\n')
    done = subprocess.run([sys.executable, "-m", "kiln.tools.kiln_main", "build-native", "--dir", str(tmp_path)],
                          env=dict(os.environ, CC=cc), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "kiln: error: building the native library: " in done.stderr
    assert "failed on kiln_native.c (exit 1):\nkiln_native.c:9: error: no such intrinsic" in done.stderr
    assert "Traceback" not in done.stderr


def test_build_native_rejects_a_bad_timeout():
    with pytest.raises(KilnError, match=r"--timeout 0: give a positive number of seconds"):
        kiln_main(["build-native", "--timeout", "0"])


# --- damaged libraries ----------------------------------------------------------------


def _damage(lib: Path, how: str) -> None:
    data = lib.read_bytes()
    if how == "truncated":
        lib.write_bytes(data[: len(data) // 2])
    elif how == "zero-filled":
        lib.write_bytes(bytes(len(data)))
    elif how == "empty":
        lib.write_bytes(b"")
    elif how == "flipped":
        mid = len(data) // 2
        lib.write_bytes(data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 64]) + data[mid + 64:])
    elif how == "no digest":
        digest_path(lib).unlink()


_LOAD_AND_RUN = """
    import numpy as np
    import kiln
    from kiln.runtime import native
    lib = native.load()
    assert lib is not None, native.build_error
    print("width", lib.kiln_vector_width())
    print("library", native.library())
"""

_MODEL = """
    import torch
    from torch.export import Dim
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).eval()
    compiled = kiln.compile(model, (torch.randn(4, 64),), dynamic_shapes=({0: Dim("B", min=1, max=64)},))
    x = torch.randn(9, 64)
    np.testing.assert_allclose(compiled(x).numpy(), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)
    print("report", compiled.report()["native"]["library"])
"""


@pytest.mark.native
@pytest.mark.parametrize("how", ["truncated", "zero-filled", "empty", "flipped", "no digest"])
def test_a_damaged_library_is_deleted_and_rebuilt(tmp_path, monkeypatch, how):
    """Never loaded (a truncated library is a SIGBUS, flipped bytes a SIGSEGV or
    SIGILL, an empty one an OSError forever): it is deleted, rebuilt with a
    warning, and the rebuilt one runs (a compiled model matches torch)."""
    cc = _copying_cc(tmp_path)
    env = _env(tmp_path, cc)
    monkeypatch.setenv("CC", cc)
    lib = native.build_library(out_dir=Path(env["KILN_NATIVE_DIR"]))
    _damage(lib, how)
    code = _LOAD_AND_RUN + (_MODEL if how == "truncated" else "")
    done = _python(code, env)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert f"the native library {lib} " in done.stderr and "deleting it and building it again" in done.stderr
    assert f"library {lib}" in done.stdout
    assert build.verify(lib) is None
    assert _links(tmp_path) == 2
    if how == "truncated":
        assert f"report {lib}" in done.stdout


@pytest.mark.native
def test_a_library_that_does_not_load_is_rebuilt_once_then_left_out(tmp_path):
    """A library whose digest matches but that dlopen refuses: deleted and built
    once more; when that one fails too, kiln runs without it, and the next
    process does not try again (``kiln build-native`` would)."""
    cc = _fake_cc(tmp_path, 'echo "not a shared object" > "$out"')
    env = _env(tmp_path, cc)
    code = """
        from kiln.runtime import native
        print("lib", native.load(), "|", native.build_error)
    """
    first = _python(code, env)
    assert first.returncode == 0, first.stderr
    assert "does not load" in first.stderr and "deleting it and building it again" in first.stderr
    assert "lib None | the native library " in first.stdout and "does not load" in first.stdout
    assert _links(tmp_path) == 2
    second = _python(code, env)
    assert second.returncode == 0, second.stderr
    assert "lib None | the native library is not built: its build failed 0 min ago" in second.stdout
    assert _links(tmp_path) == 2


def test_a_failed_build_is_not_retried_by_every_process(tmp_path, monkeypatch):
    cc = _fake_cc(tmp_path, 'echo "ld: cannot find -lkiln" >&2; exit 1')
    env = _env(tmp_path, cc)
    code = """
        from kiln.runtime import native
        print("lib", native.library(), "|", native.build_error)
    """
    first = _python(code, env)
    assert first.returncode == 0, first.stderr
    assert "building the native library (one time" in first.stderr
    assert "ld: cannot find -lkiln" in first.stderr and "kiln runs without the native library" in first.stderr
    assert _links(tmp_path) == 1
    second = _python(code, env)
    assert second.returncode == 0, second.stderr
    assert "its build failed 0 min ago (`kiln build-native` retries)" in second.stdout
    assert _links(tmp_path) == 1
    # kiln build-native always tries.
    monkeypatch.setenv("CC", cc)
    with pytest.raises(KilnError, match="ld: cannot find -lkiln"):
        kiln_main(["build-native", "--dir", env["KILN_NATIVE_DIR"]])
    assert _links(tmp_path) == 2


def test_a_run_time_build_is_off_with_kiln_native_build_0(tmp_path):
    env = _env(tmp_path, _fake_cc(tmp_path, "exit 1"), KILN_NATIVE_BUILD="0")
    done = _python("""
        from kiln.runtime import native
        print("lib", native.library(), "|", native.build_error)
    """, env)
    assert done.returncode == 0, done.stderr
    assert "lib None | the native library is not built (KILN_NATIVE_BUILD=0" in done.stdout
    assert "run `kiln build-native`" in done.stdout
    assert _links(tmp_path) == 0


# --- hosts that are not x86 ----------------------------------------------------------------


def test_a_host_that_is_not_x86_runs_without_the_library(tmp_path):
    """kiln_native.h includes x86 intrinsics: elsewhere the library is left out
    with one clear message and a model still compiles and runs."""
    env = _env(tmp_path, _fake_cc(tmp_path, "exit 1"))
    code = """
    import logging, platform
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    platform.machine = lambda: "aarch64"
    import numpy as np
    import kiln
    from kiln.runtime import native
    """ + _MODEL + """
    print("lib", native.library(), native.load(), "|", native.build_error)
    """
    done = _python(code, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lib None None | the native library is x86-only (kiln_native.h uses x86 intrinsics)" in done.stdout
    assert "this host is aarch64: kiln runs without it (OpenBLAS and generated code)" in done.stdout
    assert done.stderr.count("kiln.native: the native library is x86-only") == 1
    assert "report None" in done.stdout
    assert _links(tmp_path) == 0


def test_build_native_on_a_host_that_is_not_x86_says_so(monkeypatch, capsys):
    monkeypatch.setattr("platform.machine", lambda: "arm64")
    assert kiln_main(["build-native"]) == 0
    assert "kiln build-native: skipped: the native library is x86-only" in capsys.readouterr().out


# --- the suite's own rule ---------------------------------------------------------------------


@pytest.mark.native
def test_native_tests_fail_not_skip_without_the_library(tmp_path):
    """With no library where setup puts it, a native test is an error with a
    message saying how to build it (a skip would be a green run that tested
    nothing native), and the summary counts it."""
    env = dict(os.environ, KILN_NATIVE_DIR=str(tmp_path), KILN_NATIVE_BUILD="0")
    env.pop("KILN_NATIVE", None)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "test/python/cpu/test_native_permute.py::test_kernel_matches_numpy[float32-1-((3, 5), (0, 1))]"]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "native library missing: the native library is not built (KILN_NATIVE_BUILD=0" in done.stdout
    assert "run `kiln build-native` (scripts/setup.sh does)" in done.stdout
    assert "native tests run: 1 (0 passed, 1 failed, 0 skipped); LIBRARY MISSING" in done.stdout
    # With the library, the same test runs and is counted.
    env.pop("KILN_NATIVE_DIR")
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"native tests run: 1 (1 passed, 0 failed, 0 skipped); library {native.library()}" in done.stdout


def test_the_libraries_digest_is_its_size_and_sha256(tmp_path):
    from kiln.runtime.digest import digest_path, write_digest

    lib = tmp_path / "x.so"
    lib.write_bytes(b"\x7fELF" + bytes(100))
    assert build.verify(lib) == "does not match its digest (no digest file x.so.sha256)"
    write_digest(lib)
    assert build.verify(lib) is None
    lib.write_bytes(b"\x7fELF" + bytes(50))
    assert build.verify(lib) == "does not match its digest (54 bytes, 104 expected)"
    lib.write_bytes(b"\x7fELF" + bytes(99) + b"\x01")
    assert build.verify(lib) == "does not match its digest (sha256 mismatch)"
    lib.write_bytes(b"")
    assert build.verify(lib) == "is empty"
    lib.unlink()
    assert build.verify(lib) == "is missing"
    assert digest_path(lib).is_file()


def test_malloc_is_tuned_unless_switched_off(monkeypatch):
    calls = []

    class _Libc:
        def __init__(self, name):
            self.mallopt = lambda *a: calls.append(a) or 1

    monkeypatch.setattr(native.ctypes, "CDLL", _Libc)
    monkeypatch.setenv("KILN_MALLOC_TUNE", "0")
    native._tune_malloc()
    assert calls == []
    monkeypatch.setenv("KILN_MALLOC_TUNE", "1")
    native._tune_malloc()
    assert calls == [(-3, 32 << 20), (-1, 2**31 - 1)]  # M_MMAP_THRESHOLD fixed, M_TRIM_THRESHOLD off
