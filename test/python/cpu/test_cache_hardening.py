"""The kernel caches are untrusted input (issue 35): damaged or swapped CPU
entries are rebuilt, never loaded; unsafe cache roots are refused;
``kiln cache clear`` deletes only what kiln wrote; keys survive a moved
cache and runtime-only settings; cached libraries are closed with their
models; damaged KILNCACHE1 / JSON entries are misses."""

import gc
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_native_gemm import weight_text

import kiln
from kiln.backends import cache as cache_mod
from kiln.backends import cache_root
from kiln.backends.cache import KernelCache, default_cache_dir, digest_path, make_key
from kiln.backends.cpu import objcache
from kiln.errors import KilnError

HERE = os.path.dirname(os.path.abspath(__file__))
K, N = 48, 24  # every model below: x[B, 48] @ W[48, 24], W from a seed


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    return root


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """tempfile.gettempdir() -> a folder of this test (where the per-user fallback goes)."""
    t = tmp_path / "tmp"
    t.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(t))
    return t


def _entries(root: Path) -> list[Path]:
    return sorted((root / "cpu").rglob("*.so"))


# -- 1. damaged and swapped CPU entries, in fresh processes --------------------

SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, {here!r})
    import numpy as np, torch
    import kiln
    from test_native_gemm import weight_text
    out = []
    for seed in {seeds!r}:
        text, w = weight_text({k}, {n}, seed=seed)
        before = set((Path({root!r}) / "cpu").rglob("*.so"))
        model = kiln.compile(text)
        after = set((Path({root!r}) / "cpu").rglob("*.so"))
        x = np.random.default_rng(seed).standard_normal((5, {k}), dtype=np.float32)
        want = (torch.from_numpy(x) @ torch.from_numpy(w)).numpy()
        err = float(np.abs(np.asarray(model(x)) - want).max())
        new = sorted(str(p) for p in after - before)
        out.append({{"seed": seed, "cache": model.report()["kernel_cache"], "err": err, "new": new}})
    print(json.dumps(out))
""")


def _run(root: Path, seeds) -> tuple[list[dict], str]:
    """Compile the models of ``seeds`` in a fresh process with cache ``root``."""
    code = SCRIPT.format(here=HERE, seeds=list(seeds), k=K, n=N, root=str(root))
    env = dict(os.environ, KILN_CACHE_DIR=str(root))
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=HERE, capture_output=True, text=True,
                          timeout=300)
    # A damaged library that got loaded shows up here as a signal (SIGBUS, SIGSEGV, SIGILL).
    assert proc.returncode == 0, f"returncode {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_damaged_and_swapped_entries_are_rebuilt_in_a_new_process(cache_dir, monkeypatch):
    # Each seed's weights inside its kernel, so each model is an entry of its own
    # (past inline_limit, weights are arguments and every seed shares one entry).
    monkeypatch.setenv("KILN_INLINE_LIMIT", "1G")
    seeds = [11, 12, 13, 14, 15]
    first, _ = _run(cache_dir, seeds)
    assert [r["cache"] for r in first] == ["miss"] * 5
    entry = {r["seed"]: Path(r["new"][0]) for r in first}
    assert all(digest_path(p).is_file() for p in entry.values())

    data = entry[11].read_bytes()
    entry[11].write_bytes(data[: len(data) * 3 // 5])  # truncated
    data = bytearray(entry[12].read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 64):  # bytes flipped in the middle (code)
        data[i] ^= 0xFF
    entry[12].write_bytes(bytes(data))
    shutil.copyfile(entry[15], entry[13])  # another model's library under this key
    shutil.copyfile(entry[15], entry[14])  # ... and with its digest
    shutil.copyfile(digest_path(entry[15]), digest_path(entry[14]))

    second, stderr = _run(cache_dir, seeds)
    assert [r["cache"] for r in second] == ["miss", "miss", "miss", "miss", "hit"]
    for r in second:
        assert r["err"] < 1e-4, r
    for seed in (11, 12, 13, 14):
        assert f"{entry[seed]} is damaged or foreign" in stderr, stderr[-3000:]
    assert "sha256 mismatch" in stderr and "written for" in stderr

    third, stderr = _run(cache_dir, seeds)
    assert [r["cache"] for r in third] == ["hit"] * 5
    assert all(r["err"] < 1e-4 for r in third)
    assert "damaged" not in stderr


def test_entry_without_digest_is_not_loaded(cache_dir, caplog):
    text, w = weight_text(K, N, seed=3)
    kiln.compile(text)
    (entry,) = _entries(cache_dir)
    digest_path(entry).unlink()
    with caplog.at_level(logging.WARNING, logger="kiln.cache"):
        model = kiln.compile(text)
    assert model.report()["kernel_cache"] == "miss"
    assert any("no digest file" in r.getMessage() for r in caplog.records)
    x = np.ones((2, K), np.float32)
    np.testing.assert_allclose(model(x), x @ w, rtol=1e-4, atol=1e-4)
    assert kiln.compile(text).report()["kernel_cache"] == "hit"


# -- 5. cached libraries are closed with their models -------------------------

def _deleted_kernel_maps() -> int:
    with open("/proc/self/maps") as f:
        return len({line.split()[-2] for line in f if "kiln-kernels-" in line and "(deleted)" in line})


def test_cached_library_is_closed_when_its_last_holder_dies(cache_dir):
    text, w = weight_text(K, N, seed=21)
    kiln.compile(text)
    gc.collect()
    base = _deleted_kernel_maps()
    x = np.random.default_rng(0).standard_normal((3, K), dtype=np.float32)
    for _ in range(30):
        model = kiln.compile(text)
        assert model.report()["kernel_cache"] == "hit"
        model(x)
        del model
        gc.collect()
    assert _deleted_kernel_maps() - base <= 2
    # A kernel outlives its model: the library stays until the kernel goes.
    model = kiln.compile(text)
    kernel = model.schedule[0].kernel
    assert isinstance(kernel.engine, objcache.SharedObjectEngine)
    del model
    gc.collect()
    assert _deleted_kernel_maps() - base >= 1
    out = np.zeros((3, N), np.float32)
    kernel([x, w], [out], {"B": 3})  # the weight is an argument (past inline_limit)
    np.testing.assert_allclose(out, x @ w, rtol=1e-4, atol=1e-4)
    with pytest.raises(kiln.KilnError, match="takes 2 input"):  # not a read past the arguments
        kernel([x], [out], {"B": 3})
    del kernel
    gc.collect()
    assert _deleted_kernel_maps() - base <= 0


# -- 2. unsafe cache roots ----------------------------------------------------

def _compile_into(root_env: Path, monkeypatch, seed: int = 31):
    monkeypatch.setenv("KILN_CACHE_DIR", str(root_env))
    text, w = weight_text(K, N, seed=seed)
    model = kiln.compile(text)
    x = np.ones((2, K), np.float32)
    np.testing.assert_allclose(model(x), x @ w, rtol=1e-4, atol=1e-4)
    return model


def _fallback(private_tmp: Path) -> Path:
    return private_tmp / f"kiln-{os.geteuid()}"


def test_world_writable_root_falls_back_to_a_private_dir(tmp_path, private_tmp, monkeypatch, caplog):
    monkeypatch.setenv("KILN_INLINE_LIMIT", "1G")  # two seeds, two entries (weights in the kernels)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="kiln.cache"):
        _compile_into(shared, monkeypatch)
        _compile_into(shared, monkeypatch, seed=32)
    assert _entries(shared) == [] and list(shared.iterdir()) == []
    fallback = _fallback(private_tmp)
    assert len(_entries(fallback)) == 2
    assert (fallback.stat().st_mode & 0o777) == 0o700
    warnings = [r.getMessage() for r in caplog.records if "unsafe" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once
    assert f"kiln cache dir {shared} is unsafe" in warnings[0] and "world-writable" in warnings[0]
    assert str(fallback) in warnings[0]


def test_sticky_world_writable_root_is_refused_too(tmp_path, private_tmp, monkeypatch):
    shared = tmp_path / "sticky"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("KILN_CACHE_DIR", str(shared))
    assert default_cache_dir() == _fallback(private_tmp)


def test_root_owned_by_another_user_falls_back(tmp_path, private_tmp, monkeypatch, caplog):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 12345, 12345)
    with caplog.at_level(logging.WARNING, logger="kiln.cache"):
        _compile_into(theirs, monkeypatch)
    assert list(theirs.iterdir()) == []
    assert len(_entries(_fallback(private_tmp))) == 1
    assert any("owned by uid 12345" in r.getMessage() for r in caplog.records)


def test_unsafe_subfolder_or_parent_falls_back(tmp_path, private_tmp, monkeypatch):
    root = tmp_path / "mine"
    (root / "cpu" / "ab").mkdir(parents=True)
    (root / "cpu" / "ab").chmod(0o777)  # anyone could plant cpu/ab/<key>.so
    monkeypatch.setenv("KILN_CACHE_DIR", str(root))
    assert default_cache_dir() == _fallback(private_tmp)

    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)  # no sticky bit: anyone can swap the root for their own
    monkeypatch.setenv("KILN_CACHE_DIR", str(open_parent / "cache"))
    assert default_cache_dir() == _fallback(private_tmp)


def test_no_safe_place_is_a_clear_error(tmp_path, private_tmp, monkeypatch):
    from kiln.runtime import native

    native.library()  # found before the cache root turns unsafe (it may look in the cache too)
    monkeypatch.setenv("KILN_INLINE_LIMIT", "1G")  # two seeds, two entries (weights in the kernels)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    planted = _fallback(private_tmp)
    planted.mkdir()
    os.chown(planted, 12345, 12345)  # someone made "our" private folder first
    monkeypatch.setenv("KILN_CACHE_DIR", str(shared))
    with pytest.raises(KilnError, match=f"kiln cache dir {shared} is unsafe .*world-writable.*so is the private "
                                        f"fallback .*{planted} is owned by uid 12345"):
        kiln.compile(weight_text(K, N, seed=33)[0])


def test_a_symlinked_fallback_is_refused(tmp_path, private_tmp, monkeypatch):
    monkeypatch.setenv("KILN_INLINE_LIMIT", "1G")  # two seeds, two entries (weights in the kernels)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    _fallback(private_tmp).symlink_to(target)
    monkeypatch.setenv("KILN_CACHE_DIR", str(shared))
    with pytest.raises(KilnError, match="is a symlink"):
        default_cache_dir()


def test_kiln_creates_private_folders(tmp_path, monkeypatch):
    root = tmp_path / "new" / "cache"
    _compile_into(root, monkeypatch)
    (entry,) = _entries(root)
    for d in (tmp_path / "new", root, root / "cpu", entry.parent):
        assert (d.stat().st_mode & 0o777) == 0o700, d
    assert (root / cache_root.MARKER).is_file()


# -- 3. kiln cache clear -------------------------------------------------------

def _home_like(path: Path) -> list[Path]:
    files = [path / ".ssh" / "id_rsa", path / ".git" / "HEAD", path / "src" / "main.c", path / "cpu" / "notes.txt"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("precious")
    return files


def test_clear_refuses_a_folder_kiln_did_not_create(tmp_path, caplog):
    home = tmp_path / "home"
    files = _home_like(home)
    with caplog.at_level(logging.WARNING, logger="kiln.cache"):
        kc = KernelCache(home)  # used as a cache, but not marked
    assert not (home / cache_root.MARKER).exists()
    assert any("will refuse it" in r.getMessage() for r in caplog.records)
    with pytest.raises(KilnError, match=f"refusing to clear {home}: it has no .kiln-cache marker"):
        kc.clear()
    assert all(f.read_text() == "precious" for f in files)


def test_cli_clear_refuses_without_a_traceback(tmp_path):
    home = tmp_path / "home"
    files = _home_like(home)
    proc = subprocess.run([sys.executable, "-c", "from kiln.tools.kiln_main import entry; entry()", "cache", "clear",
                           "--dir", str(home)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert f"refusing to clear {home}" in proc.stderr and "Traceback" not in proc.stderr
    assert all(f.read_text() == "precious" for f in files)


def test_clear_deletes_only_kiln_folders(cache_dir, monkeypatch):
    _compile_into(cache_dir, monkeypatch)
    kc = KernelCache(cache_dir)
    kc.put_json("choice", make_key("choice", "x", {}, "t"), {"a": 1})
    kc.source_file("x = 1\n")
    mine = cache_dir / "mine.txt"
    mine.write_text("keep")
    (cache_dir / "notes").mkdir()
    (cache_dir / "notes" / "n.txt").write_text("keep")
    n = kc.clear()
    assert n == 2 + 1 + 1  # a CPU entry and its digest, a choice, a source file
    assert sorted(p.name for p in cache_dir.iterdir()) == [cache_root.MARKER, "mine.txt", "notes"]
    assert (cache_dir / "notes" / "n.txt").read_text() == "keep"
    # Still a kiln cache: the next compile refills it.
    assert _compile_into(cache_dir, monkeypatch).report()["kernel_cache"] == "miss"


def test_a_cache_from_before_the_marker_is_marked(tmp_path):
    old = tmp_path / "old"
    (old / "choice" / "ab").mkdir(parents=True)
    (old / "choice" / "ab" / ("ab" + "0" * 62 + ".entry")).write_bytes(b"KILNCACHE1\n")
    (old / "cpu" / "cd").mkdir(parents=True)
    (old / "cpu" / "cd" / "x.so").write_bytes(b"")
    kc = KernelCache(old)
    assert (old / cache_root.MARKER).is_file()
    assert kc.clear() == 2 and sorted(p.name for p in old.iterdir()) == [cache_root.MARKER]


# -- 4. keys: no cache path, no runtime-only settings ---------------------------

def test_key_has_no_library_folder():
    """The native runtime's library lives in the cache dir (or moves with
    kiln): only its name, which hashes its build, is part of a key."""
    from kiln._mlir import ir
    from kiln.context import make_context
    from kiln.module import parse_module

    text, _ = weight_text(16, 8, seed=6)
    with make_context(), ir.Location.unknown():
        module = parse_module(text, "<test>")
        a = objcache.cache_key(module, 3, ["/a/cache/native/kiln_native-0123.so"])
        b = objcache.cache_key(module, 3, ["/b/moved/native/kiln_native-0123.so"])
        c = objcache.cache_key(module, 3, ["/a/cache/native/kiln_native-4567.so"])
    assert a == b != c


def test_copied_cache_still_hits_in_a_new_process(tmp_path):
    first, _ = _run(tmp_path / "a", [41])
    assert first[0]["cache"] == "miss"
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    again, stderr = _run(tmp_path / "b", [41])
    assert again[0]["cache"] == "hit", stderr[-2000:]
    assert again[0]["err"] < 1e-4


def test_runtime_only_settings_keep_the_key(cache_dir, monkeypatch):
    from kiln.backends.cpu import library

    text, w = weight_text(K, N, seed=51)
    assert kiln.compile(text).report()["kernel_cache"] == "miss"
    for name, value in [("KILN_DEBUG", "1"), ("KILN_FAST", "0"), ("KILN_SPLIT", "0"), ("KILN_HUGEPAGES", "0"),
                        ("KILN_PIN", "0"), ("KILN_RESHAPE_VIEWS", "0"), ("KILN_WINOGRAD", "0"),
                        ("KILN_THREADS", str(library.native_threads())),
                        # the helpers ask for thread counts at run time (test_threads_runtime.py)
                        ("KILN_THREADS", str(library.native_threads() + 1)), ("KILN_BLAS_THREADS", "3")]:
        monkeypatch.setenv(name, value)
        model = kiln.compile(text)
        assert model.report()["kernel_cache"] == "hit", name
    x = np.ones((4, K), np.float32)
    np.testing.assert_allclose(model(x), x @ w, rtol=1e-4, atol=1e-4)
    assert [name for name, _ in objcache.codegen_settings()] == [n for n, _ in objcache.CODEGEN_SETTINGS]


# -- other kinds: damaged KILNCACHE1 and JSON entries are misses ----------------

@pytest.mark.parametrize("damage", [
    b"", b"KILNCACHE1", b"KILNCACHE1\n[1, 2]\nxyz", b'KILNCACHE1\n"header"\nxyz', b"KILNCACHE1\n{}\nxyz",
    b'KILNCACHE1\n{"size": "3", "sha256": 5}\nxyz',
    b'KILNCACHE1\n{"size": 3, "sha256": "%s", "meta": [1]}\nxyz' % hashlib.sha256(b"xyz").hexdigest().encode(),
    b"KILNCACHE1\n" + b"[" * 100000 + b"\nxyz", b"KILNCACHE1\n\xff\xfe\nxyz", b"\x7fELF" + bytes(60),
])
def test_damaged_entries_of_other_kinds_are_misses(tmp_path, damage):
    kc = KernelCache(tmp_path)
    key = make_key("choice", "x", {}, "t")
    kc.put_json("choice", key, {"a": 1})
    kc.path("choice", key).write_bytes(damage)
    assert kc.get_json("choice", key) is None and not kc.path("choice", key).exists()
    assert kc.stats.corrupt == 1


@pytest.mark.parametrize("payload", [b"{not json", b"\xff\xfe", b"[" * 100000])
def test_json_entry_with_a_bad_payload_is_a_miss(tmp_path, payload):
    kc = KernelCache(tmp_path)
    key = make_key("choice", "y", {}, "t")
    kc.put("choice", key, payload)  # a valid entry whose payload is not JSON
    assert kc.get_json("choice", key) is None and not kc.path("choice", key).exists()


def test_an_entry_that_is_a_folder_is_a_miss(tmp_path):
    kc = KernelCache(tmp_path)
    key = make_key("choice", "z", {}, "t")
    kc.path("choice", key).mkdir(parents=True)
    assert kc.get("choice", key) is None


def test_digest_helpers(tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x7fELF library")
    cache_mod.write_digest(lib, key="k1")
    assert cache_mod.verify_digest(lib) and cache_mod.verify_digest(lib, "k1")
    assert cache_mod.digest_problem(lib, "k2") == "stored under another key"
    assert cache_mod.digest_problem(lib, data=b"\x7fELF librarz") == "sha256 mismatch"
    lib.write_bytes(b"\x7fELF")
    assert cache_mod.digest_problem(lib) == "4 bytes, 12 expected"
    digest_path(lib).write_bytes(b"garbage")
    assert cache_mod.digest_problem(lib) == "unreadable digest file lib.so.sha256"


def test_a_malformed_setting_does_not_break_the_key(monkeypatch):
    """The key reads each setting's effective value; one that does not parse
    is keyed as written (the lowering reports it where it reads it)."""
    monkeypatch.setenv("KILN_SMALL_M", "abc")
    settings = dict(objcache.codegen_settings())
    assert settings["KILN_SMALL_M"] == "unparsed 'abc'"
