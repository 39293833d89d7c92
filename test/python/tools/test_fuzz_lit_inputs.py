"""Issue 35's acceptance fuzz test: seeded mutations of the lit inputs through
``kiln-opt`` never kill it with a signal, never exit 70 (an internal error:
a kiln bug), and never hang, over every pipeline tried.

The mutations, the pipelines and the in-process batch runner are in
``_fuzz_lit.py``.  The default run is bounded to stay well under a minute;
``KILN_FUZZ_COUNT`` (mutants) and ``KILN_FUZZ_SEED`` make it longer or
different, e.g. ``KILN_FUZZ_COUNT=3000 KILN_FUZZ_SEED=7 pytest -q
test/python/tools/test_fuzz_lit_inputs.py``.  A crash that MLIR's own parser
has too (``torch-mlir-opt`` dies on the same text) is a failure as well: kiln
parses every text in a forked probe first (``kiln.module._probe_parse``), so
the parser's crashes never reach the process.
"""

import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _fuzz_lit as fuzz  # noqa: E402

COUNT = int(os.environ.get("KILN_FUZZ_COUNT", "500"))
SEED = int(os.environ.get("KILN_FUZZ_SEED", "35"))
# The runtime must not start a native-library build (minutes) in the middle
# of a mutant: use the library setup built, or run without it.
DRIVER_ENV = {"KILN_NATIVE_BUILD": "0"}


def test_mutated_lit_inputs_never_crash_hang_or_exit_70(tmp_path):
    jobs = fuzz.make_jobs(COUNT, SEED, str(tmp_path))
    batch = fuzz.run_jobs(jobs, str(tmp_path), timeout=60.0, env=DRIVER_ENV)
    assert sorted(batch.outcomes) == [j.id for j in jobs]
    tried = {tuple(j.args[1:]) for j in jobs}
    if COUNT >= 2 * len(fuzz.GENERIC_PIPELINES):
        assert all(tuple(p) in tried for p in fuzz.GENERIC_PIPELINES)
    failures = batch.failures
    assert not failures, f"{len(failures)} of {COUNT} mutants broke kiln-opt's contract:\n" + "\n".join(
        fuzz.describe(o) for o in failures)
    # The run tested something: some mutants got through their pipelines.
    assert sum(o.status == 0 for o in batch.outcomes.values()) >= COUNT // 20


def _job(tmp_path, i, text, args=(), env=None):
    path = tmp_path / f"j{i}.mlir"
    path.write_text(text)
    return fuzz.Job(i, "self-test", [], [str(path), *args], env or {}, str(path), text.encode())


GOOD = """
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  return %0 : !kiln.tensor<["B", 4], f32>
}
"""


def test_the_runner_catches_signals_hangs_and_internal_errors(tmp_path):
    # The harness itself must be able to fail: a mutant that dies of SIGSEGV,
    # one that hangs and one that raises are each blamed, alone, and the
    # batch goes on after them.
    jobs = [
        _job(tmp_path, 0, GOOD, ["--kiln-infer-shapes"]),
        _job(tmp_path, 1, GOOD, env={"KILN_FUZZ_SELF_TEST": "signal"}),
        _job(tmp_path, 2, "func.func @f(", ["--cse"]),
        _job(tmp_path, 3, GOOD, env={"KILN_FUZZ_SELF_TEST": "hang"}),
        _job(tmp_path, 4, GOOD, env={"KILN_FUZZ_SELF_TEST": "raise"}),
        _job(tmp_path, 5, GOOD, ["--kiln-fuse"]),
    ]
    batch = fuzz.run_jobs(jobs, str(tmp_path), timeout=5.0, env=DRIVER_ENV)
    status = {i: o.status for i, o in batch.outcomes.items()}
    assert status == {0: 0, 1: -11, 2: 1, 3: "hang", 4: 70, 5: 0}
    assert batch.restarts == 2
    assert [o.job.id for o in batch.kiln_failures] == [1, 3, 4]
    assert batch.outcomes[1].alone and batch.outcomes[3].alone
    assert "RuntimeError: a bug in kiln (self-test)" in batch.outcomes[4].detail


def test_a_crash_set_up_by_an_earlier_mutant_is_traced_to_it(tmp_path):
    # A heap corrupted by one mutant kills a later one: the runner finds the
    # earlier one by halving what ran before, and the crash is kiln's unless
    # MLIR's parser alone does the same with the two texts.
    jobs = [_job(tmp_path, i, GOOD, ["--kiln-infer-shapes"]) for i in range(6)]
    jobs[2].env = {"KILN_FUZZ_SELF_TEST": "arm"}
    jobs[5].env = {"KILN_FUZZ_SELF_TEST": "signal-if-armed"}
    batch = fuzz.run_jobs(jobs, str(tmp_path), timeout=30.0, env=DRIVER_ENV)
    victim = batch.outcomes[5]
    assert victim.status == -11
    assert victim.alone is False
    assert victim.culprit is not None and victim.culprit.id == 2
    assert not victim.upstream
    assert [o.job.id for o in batch.kiln_failures] == [5]
    assert "after mutant 2" in fuzz.describe(victim)


def test_a_heap_corrupted_by_mlirs_parser_is_told_apart():
    # Found by the fuzzer: this parse error leaves MLIR's heap corrupted, and
    # the next parse in the process aborts ("malloc(): unaligned tcache chunk
    # detected") -- MLIR's bug, whatever kiln does around it.  (Should a new
    # torch-mlir fix it, the last assert fails: then drop it.)
    culprit = (b'#id = affine_map<(m, n) -> (m, n)>\n    %1 = arith.addf %r, %0 : f32\n'
               b'  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}\n'
               b'      ins(%y, %b : memref<?x4xf32>, memref<?x4xf32>) outs(%y : memref<?x4xf32>) {\n'
               b'  ^bb0(%p: f32, %q: f32, %r: f32):\n  ^bb0(%p: f32, %q: f32, %r: f32):\n')
    good = GOOD.encode()
    assert not fuzz.upstream_parse_sequence_crashes([good, good])
    assert fuzz.upstream_parse_sequence_crashes([culprit, good])


@pytest.mark.parametrize("line, args, env", [
    ("// RUN: kiln-opt %s --split-input-file --kiln-fuse='kinds=elementwise' | FileCheck %s --check-prefix=EW",
     ["--kiln-fuse=kinds=elementwise"], {}),
    ("// RUN: env KILN_NATIVE=0 kiln-opt %s --kiln-cpu-library | FileCheck %s --check-prefix=BLAS",
     ["--kiln-cpu-library"], {"KILN_NATIVE": "0"}),
    ("// RUN: not kiln-opt %s --split-input-file --convert-kiln-to-linalg 2>&1 | FileCheck %s",
     ["--convert-kiln-to-linalg"], {}),
    ("// RUN: kiln-opt %s --kiln-dce --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s",
     ["--kiln-dce", "--mlir-pass-statistics"], {}),
    ("// RUN: kiln-opt %s | kiln-opt | FileCheck %s", [], {}),
])
def test_run_lines_give_the_pipelines(line, args, env):
    assert fuzz.run_line_pipelines(line) == [(args, env)]


def test_mutants_are_seeded(tmp_path):
    corpus = fuzz.load_corpus()
    assert len(corpus) > 100  # every chunk of every lit input
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    a = fuzz.make_jobs(30, 7, str(tmp_path / "a"), corpus)
    b = fuzz.make_jobs(30, 7, str(tmp_path / "b"), corpus)
    c = fuzz.make_jobs(30, 8, str(tmp_path / "c"), corpus)
    assert [(j.data, j.args[1:], j.env) for j in a] == [(j.data, j.args[1:], j.env) for j in b]
    assert [j.data for j in a] != [j.data for j in c]
    assert pathlib.Path(a[3].path).read_bytes() == a[3].data
