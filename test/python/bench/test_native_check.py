"""bench/native_check.py (the native convolution and attention checked and
timed without the MLIR bindings): its cases are the test files', its checks
find a wrong kernel, its timing runs, and on an AVX-512 host the AVX2 build
passes the same checks."""

import ctypes
import os
import platform
import subprocess

import numpy as np
import pytest

from kiln.bench import native_check

# The script builds the native sources with cc: without a compiler (or the
# library setup built with it) these fail, not skip (conftest.py).
pytestmark = [pytest.mark.native, pytest.mark.cc]


@pytest.fixture(scope="module")
def lib():
    """The library built once by the script (a pool of two threads)."""
    return native_check.build(2)


def test_geometries_are_read_from_the_conv_tests():
    geometries = native_check.geometries()
    assert len(geometries) > 40
    assert all(len(g) == 10 for g in geometries)
    assert (1, 3, 8, 70, 4, 3, 3, 2, 1, 1) in geometries


def test_sources_and_flags_are_kilns():
    from kiln.runtime import native

    assert native_check.SOURCES == native.SOURCE_NAMES
    assert native_check.FLAGS == native.FLAGS


def test_check_passes_and_catches_a_wrong_result(lib, monkeypatch, capsys):
    monkeypatch.setattr(native_check, "geometries", lambda: [(1, 16, 12, 12, 32, 3, 3, 1, 1, 1),
                                                              (2, 32, 9, 9, 16, 3, 3, 2, 1, 1)])
    assert native_check.check(lib, [1, 2]) == 0
    real = native_check.conv

    def off_by_one(lib, g, x, wt, bias, res, beta, relu, y, threads, slot):
        real(lib, g, x, wt, bias, res, beta, relu, y, threads, slot)
        y.flat[0] += np.float32(1.0)

    monkeypatch.setattr(native_check, "conv", off_by_one)
    assert native_check.check(lib, [1]) > 0
    assert "FAIL" in capsys.readouterr().out


def test_timing_prints_a_row_per_layer(lib, capsys):
    native_check.timing(lib, [2], only=["cnn conv1 B8"], rounds=1)
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("cnn conv1")]
    assert len(rows) == 1
    threads, kiln_us, torch_us = int(rows[0][3]), float(rows[0][4]), float(rows[0][5])
    assert threads == 2 and kiln_us > 0 and torch_us > 0


def test_attention_check_passes_and_catches_a_wrong_result(lib, monkeypatch, capsys):
    cases = native_check.attention_cases()
    assert (4, 130, 130, 64, 64, True) in cases
    monkeypatch.setattr(native_check, "attention_cases", lambda: [(2, 37, 37, 16, 24, True), (1, 5, 9, 8, 5, False)])
    assert native_check.check_attention(lib, [1, 2]) == 0

    class Off:
        """The library, its attention's first output element off by one."""

        def __getattr__(self, name):
            return getattr(lib, name)

        def kiln_attention(self, *args):
            rc = lib.kiln_attention(*args)
            ctypes.c_float.from_address(args[8]).value += 1.0
            return rc

    assert native_check.check_attention(Off(), [1]) == 2
    assert "FAIL attention" in capsys.readouterr().out


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 vector builds")
def test_the_avx2_build_passes_the_checks_on_an_avx512_host():
    """An AVX-512 machine runs the AVX2 build too, so the 8-lane paths are
    checked wherever the suite runs (the host's own build covers its width)."""
    from kiln.runtime import native

    host = native.load()
    if host is None or host.kiln_vector_width() != 16:
        pytest.skip("the host's own build is the AVX2 one: the other tests check it")
    cc = os.environ.get("CC", "cc")
    probe = subprocess.run([cc, "-march=x86-64-v3", "-E", "-x", "c", os.devnull], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"{cc} does not know -march=x86-64-v3 (gcc 11 / clang 12 and later do)")
    avx2 = native_check.build(2, march="x86-64-v3")
    assert avx2.kiln_vector_width() == 8
    assert native_check.check(avx2, [2]) == 0
    assert native_check.check_attention(avx2, [1, 2]) == 0
