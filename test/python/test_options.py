"""kiln.options: one typed Options object, environment variables as overrides
of its defaults, keywords over both; kiln.compile's threads/pin (the native
pool, process-wide) and per-compile settings; the kiln logger; the README
table generated from the settings."""

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import kiln
from kiln import options
from kiln.errors import KilnError
from kiln.options import Options

ROOT = Path(kiln.__file__).resolve().parent
MLP = ROOT / "examples" / "mlp.mlir"


# --- parsing the environment -----------------------------------------------------------


@pytest.mark.parametrize("env, message", [
    ({"KILN_PIN": "maybe"}, "KILN_PIN must be 0 or 1, got 'maybe'"),
    ({"KILN_FAST": "false"}, "KILN_FAST must be 0 or 1, got 'false'"),
    ({"KILN_THREADS": "0"}, "KILN_THREADS='0' is not a positive whole number of threads"),
    ({"KILN_THREADS": "two"}, "KILN_THREADS='two' is not a positive whole number of threads"),
    ({"KILN_BLAS_THREADS": "2.5"}, "KILN_BLAS_THREADS='2.5' is not a whole number of threads"),
    ({"KILN_SMALL_M": "-1"}, "KILN_SMALL_M must be a whole number >= 0, got '-1'"),
    ({"KILN_BLAS_MT_MNK": "1e6"}, "KILN_BLAS_MT_MNK must be a whole number >= 0, got '1e6'"),
    ({"KILN_NATIVE_BUILD_TIMEOUT": "0"}, "KILN_NATIVE_BUILD_TIMEOUT='0' is not a positive number of seconds"),
    ({"KILN_ARENA_POOL_BYTES": "lots"}, "KILN_ARENA_POOL_BYTES must be a number of bytes .*got 'lots'"),
    ({"KILN_LOG": "loud"}, "KILN_LOG must be one of debug, info, warning, error, got 'loud'"),
])
def test_a_malformed_variable_is_an_error_naming_it_and_the_value(env, message):
    with pytest.raises(KilnError, match=message):
        Options.from_env(env)


def test_variables_parse_to_typed_values():
    o = Options.from_env({"KILN_THREADS": " 3 ", "KILN_PIN": "1", "KILN_FAST": "0", "KILN_SMALL_M": "64",
                          "KILN_BLAS_THREADS": "0", "KILN_ARENA_POOL_BYTES": "512M", "KILN_CACHE_DIR": "/tmp/c",
                          "KILN_NATIVE_BUILD_TIMEOUT": "2.5", "KILN_LOG": "INFO", "KILN_DEBUG": "1"})
    assert (o.threads, o.pin, o.fast, o.small_m, o.blas_threads) == (3, True, False, 64, 1)
    assert (o.arena_pool_bytes, o.cache_dir, o.native_build_timeout, o.log, o.debug) == (512 << 20, "/tmp/c", 2.5,
                                                                                          "info", True)
    assert o.sources["threads"] == "env" and o.sources["split"] == "default"
    assert o.changed() == {"threads": 3, "pin": True, "fast": False, "small_m": 64, "blas_threads": 1,
                           "arena_pool_bytes": 512 << 20, "cache_dir": "/tmp/c", "native_build_timeout": 2.5,
                           "log": "info", "debug": True}


def test_unset_or_empty_variables_keep_the_defaults():
    assert Options.from_env({"KILN_THREADS": "", "KILN_PIN": "  "}) == Options()
    defaults = Options()
    assert defaults.pin is False  # pinning only when asked: it surprises users who share cores
    assert (defaults.threads, defaults.native, defaults.fast, defaults.log) == (None, True, True, None)


# --- keywords --------------------------------------------------------------------------


def test_keywords_override_the_environment_and_skip_its_variable():
    o = Options.from_env({"KILN_THREADS": "3", "KILN_PIN": "maybe", "KILN_FAST": "0"}, threads=2, pin=True)
    assert (o.threads, o.pin, o.fast) == (2, True, False)  # the malformed KILN_PIN is not read
    assert o.sources["threads"] == "keyword" and o.sources["fast"] == "env"


@pytest.mark.parametrize("keywords, message", [
    ({"pin": "yes"}, "pin must be True or False, got 'yes'"),
    ({"threads": 0}, "threads=0 is not a positive whole number of threads"),
    ({"threads": 1.5}, "threads=1.5 is not a positive whole number of threads"),
    ({"threads": True}, "threads=True is not a positive whole number of threads"),
    ({"arena_pool_bytes": "1.5G"}, "arena_pool_bytes must be a number of bytes"),
    ({"log": "verbose"}, "log must be one of debug, info, warning, error, got 'verbose'"),
])
def test_a_bad_keyword_value_is_an_error_naming_the_keyword(keywords, message):
    with pytest.raises(KilnError, match=message):
        Options(**keywords)
    with pytest.raises(KilnError, match=message):
        Options.from_env({}, **keywords)


def test_an_unknown_option_is_an_error_listing_the_options():
    with pytest.raises(KilnError, match="unknown kiln option.*thread_count.*options: threads, pin"):
        Options.from_env({}, thread_count=2)
    with pytest.raises(KilnError, match="unknown kiln option 'thread_count'"):
        with options.using(thread_count=2):
            pass


def test_current_layers_defaults_environment_configure_and_using(monkeypatch):
    monkeypatch.setenv("KILN_FAST", "0")
    monkeypatch.setenv("KILN_SMALL_M", "32")
    assert (options.current().fast, options.current().small_m) == (False, 32)  # the environment, read now
    try:
        options.configure(small_m=48)
        assert options.current().small_m == 48  # configure over the environment
        with options.using(small_m=16, fast=True) as inside:
            assert (inside.small_m, inside.fast) == (16, True)
            assert options.current().small_m == 16  # using over configure
        assert (options.current().small_m, options.current().fast) == (48, False)
    finally:
        options.reset()
    assert options.current().small_m == 32


def test_using_is_local_to_its_thread():
    import threading

    seen = []
    with options.using(fast=False):
        t = threading.Thread(target=lambda: seen.append(options.current().fast))
        t.start()
        t.join()
        assert options.current().fast is False
    assert seen == [True]


def test_a_setting_read_once_per_process_cannot_change_after_it_was_read(monkeypatch):
    monkeypatch.setattr(options, "_frozen", {})
    options.configure(winograd=False)  # not read yet: fine
    options.reset()
    options.read_once("winograd", True)
    options.configure(winograd=True)  # the value it has: fine
    with pytest.raises(KilnError, match="winograd is read once per process, when the native library loads and "
                                        "was True: it cannot become False"):
        options.configure(winograd=False)
    options.reset()


def test_the_cache_key_covers_exactly_the_codegen_settings():
    from kiln.backends.cpu.objcache import CODEGEN_SETTINGS

    codegen = {s.env for s in options.settings() if s.when == "codegen"}
    assert codegen == {env for env, _ in CODEGEN_SETTINGS}
    runtime = {s.name for s in options.settings() if s.when != "codegen"}
    assert {"threads", "pin", "debug", "log", "blas_threads"} <= runtime


def test_every_option_has_a_variable_a_doc_and_a_field():
    import dataclasses

    fields = [f.name for f in dataclasses.fields(Options) if f.name != "sources"]
    assert fields == [s.name for s in options.settings()]
    for s in options.settings():
        assert s.env == "KILN_" + s.name.upper() and s.doc and s.when in options.WHEN
        assert getattr(Options(), s.name) == s.default


# --- the README table --------------------------------------------------------------------


def test_the_readme_table_is_current():
    """Regenerated from the settings and compared, as a golden file:
    `python -m kiln.tools.options_table` rewrites it."""
    readme = (ROOT / "README.md").read_text()
    assert options.markdown_table() in readme
    assert options.update_readme(ROOT / "README.md", write=False) is False
    for s in options.settings():
        assert f"| `{s.env}` |" in readme


def test_the_table_check_fails_on_a_stale_table(tmp_path):
    from kiln.tools.options_table import main

    stale = tmp_path / "README.md"
    stale.write_text("intro\n" + options.markdown_table().replace("| `KILN_PIN` | 0 |", "| `KILN_PIN` | 1 |")
                     + "\nrest\n")
    assert main(["-o", str(stale), "--check"]) == 1
    assert main(["-o", str(stale)]) == 0
    assert main(["-o", str(stale), "--check"]) == 0
    assert stale.read_text() == "intro\n" + options.markdown_table() + "\nrest\n"


# --- threads and pinning: the native pool ----------------------------------------------------


@pytest.fixture
def pool():
    """The native library, with the pool put back as it was after the test."""
    from kiln.runtime import native

    lib = native.load()
    before = native.pool_threads()
    yield native
    options.reset()
    options.configure(threads=before, pin=False)
    options.reset()
    assert native.pool_threads() == before and lib.kiln_pool_pinned() == 0


def _mlp():
    from kiln.bench.models import tiny_mlp

    return tiny_mlp()


@pytest.mark.native
def test_compile_threads_sets_the_pool_and_the_report_shows_it(pool):
    module, args, dynamic = _mlp()
    x = torch.randn(5, *args[0].shape[1:])
    with torch.no_grad():
        want = module(x).numpy()
    one = kiln.compile(module, args, dynamic_shapes=dynamic, threads=1)
    assert pool.pool_threads() == 1 and one.report()["threads"] == 1
    np.testing.assert_allclose(one(x.numpy()), want, rtol=1e-5, atol=1e-6)
    three = kiln.compile(module, args, dynamic_shapes=dynamic, threads=3)  # resized: the pool is process-wide
    assert three.report()["threads"] == 3 and one.report()["threads"] == 3
    assert "pool of 3 thread(s)" in str(three.report())
    for m in (one, three):
        for b in (1, 5, 16):
            xb = torch.randn(b, *args[0].shape[1:])
            with torch.no_grad():
                np.testing.assert_allclose(m(xb.numpy()), module(xb).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(KilnError, match="threads=0 is not a positive whole number of threads"):
        kiln.compile(module, args, dynamic_shapes=dynamic, threads=0)
    assert pool.pool_threads() == 3


@pytest.mark.native
def test_pinning_is_off_unless_asked(pool):
    cpus = len(os.sched_getaffinity(0))
    options.configure(threads=cpus, pin=False)
    assert pool.pool_pinned() == 0
    options.configure(pin=True)  # rebinds the running pool: a worker per CPU but the caller's
    assert pool.pool_pinned() == cpus - 1 and pool.pool_threads() == cpus
    options.configure(pin=False)
    assert pool.pool_pinned() == 0


_BOUND = """
import os
from kiln.runtime import native
native.load()
main = os.getpid()
print(native.pool_threads(), native.pool_pinned(),
      sum(len(os.sched_getaffinity(int(t))) == 1 for t in os.listdir("/proc/self/task") if int(t) != main))
"""


@pytest.mark.native
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: there is no worker to bind")
def test_a_fresh_process_binds_no_worker_without_kiln_pin():
    """A pool as big as the machine (the case that bound workers before)
    leaves them to the scheduler by default; KILN_PIN=1 binds them."""
    cpus = len(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_PIN", "KILN_THREADS")}
    out = subprocess.run([sys.executable, "-c", _BOUND], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(cpus), "0", "0"], out.stderr
    out = subprocess.run([sys.executable, "-c", _BOUND], env={**env, "KILN_PIN": "1"}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == [str(cpus), str(cpus - 1), str(cpus - 1)], out.stderr


# --- per-compile settings ------------------------------------------------------------------------


def test_compile_keywords_apply_to_that_compile_only():
    model = kiln.compile(str(MLP), fast=False, reshape_views=False)
    assert model.runtime.fast_on is False
    assert options.current().fast is True and options.current().reshape_views is True
    assert kiln.compile(str(MLP)).runtime.fast_on is True
    with pytest.raises(KilnError, match="fast must be True or False, got 'no'"):
        kiln.compile(str(MLP), fast="no")


# --- logging -------------------------------------------------------------------------------------


def _compile_in_subprocess(env_extra: dict, tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KILN_LOG"}
    env.update(KILN_CACHE_DIR=str(tmp_path / "cache"), **env_extra)
    code = f"import kiln\nkiln.compile({str(MLP)!r})\n"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_kiln_log_info_prints_the_stages_and_a_plain_compile_prints_nothing(tmp_path):
    quiet = _compile_in_subprocess({}, tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    loud = _compile_in_subprocess({"KILN_LOG": "info"}, tmp_path)
    assert loud.returncode == 0, loud.stderr
    for line in ("kiln.compile: INFO: import (str): ", "kiln.compile: INFO: graph passes (kiln-default-cpu): ",
                 "kiln.compile: INFO: partition + memory plan: ", "kiln.cache: INFO: CPU kernel cache hit: ",
                 "kiln.compile: INFO: kernels: ", "kiln.compile: INFO: compiled in "):
        assert line in loud.stderr, loud.stderr
    assert loud.stderr.count("compiled in") == 1  # once: not also through a root handler


def test_a_model_with_fallbacks_warns_once_naming_the_ops(caplog):
    class Bessel(torch.nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(torch.relu(x)) + 1

    dyn = {"x": {0: torch.export.Dim("B", min=1, max=8)}}
    with caplog.at_level(logging.WARNING, logger="kiln"):
        kiln.compile(Bessel(), (torch.randn(2, 4),), dynamic_shapes=dyn)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "kiln.compile"]
    assert len(warnings) == 1
    assert "1 op(s) of this model run as PyTorch fallbacks" in warnings[0].getMessage()
    assert "aten.special_bessel_j0" in warnings[0].getMessage()


def test_configure_logging_installs_one_handler_and_updates_its_level():
    logger = logging.getLogger("kiln")
    saved = (list(logger.handlers), logger.level, logger.propagate, options._handler)
    try:
        options._handler = None
        options.configure_logging("debug")
        options.configure_logging("warning")
        ours = [h for h in logger.handlers if h not in saved[0]]
        assert len(ours) == 1 and ours[0].level == logging.WARNING and logger.level == logging.WARNING
        with pytest.raises(KilnError, match="log must be one of debug, info, warning, error, got 'chatty'"):
            options.configure_logging("chatty")
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
        options._handler = saved[3]


def _cli(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KILN_LOG"}
    env["KILN_CACHE_DIR"] = str(tmp_path / "cache")
    code = "import sys\nfrom kiln.tools.kiln_compile import entry\nsys.argv[0] = 'kiln-compile'\nentry()"
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)


def test_kiln_compile_v_logs_the_stages_and_threads_is_checked(tmp_path):
    out = _cli([str(MLP), "-o", str(tmp_path / "a"), "-v", "--threads", "1"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "kiln.compile: INFO: partition + memory plan: " in out.stderr
    assert "DEBUG" not in out.stderr
    bad = _cli([str(MLP), "-o", str(tmp_path / "b"), "--threads", "0"], tmp_path)
    assert bad.returncode == 1
    assert "kiln-compile: error: threads=0 is not a positive whole number of threads" in bad.stderr


@pytest.mark.native
def test_kiln_run_threads_sets_the_pool_for_the_run(pool, capsys):
    from kiln.tools.kiln_run import main

    inputs = ["--input", "0=2x3x32", "--input", "1=32x64", "--input", "2=64", "--input", "3=64x32"]
    assert main([str(MLP), *inputs, "--repeat", "2", "--threads", "1", "--report"]) == 0
    assert "pool of 1 thread(s)" in capsys.readouterr().out
    assert pool.pool_threads() == 1


def test_a_specialization_compiled_at_run_time_is_logged(caplog):
    model = kiln.compile(str(MLP), policy="specialize", static_kernels=False)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s, dtype=np.float32) for s in ((2, 3, 32), (32, 64), (64,), (64, 32))]
    with caplog.at_level(logging.INFO, logger="kiln.runtime"):
        model(*args)
        model(*args)  # the same bucket: a cache hit, not logged again
    lines = [r.getMessage() for r in caplog.records if r.name == "kiln.runtime"]
    assert len(lines) == 1 and lines[0].startswith("specialization compiled at run time: spec B in ")
    assert "(for B=2, L=3)" in lines[0]
