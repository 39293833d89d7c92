"""kiln-opt as a user meets it: exit codes, messages, flags, and no tracebacks."""

import pathlib
import subprocess
import sys

import pytest

from kiln._mlir import ir
from kiln.context import make_context
from kiln.errors import KilnError
from kiln.module import parse_module

ROOT = pathlib.Path(__file__).resolve().parents[3]
KILN_OPT = [sys.executable, "-m", "kiln.tools.kiln_opt"]

GOOD = """
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["?", 4], f32> {
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["?", 4], f32>
  %1 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["?", 4], f32>
  %2 = "kiln.add"(%0, %1) : (!kiln.tensor<["?", 4], f32>, !kiln.tensor<["?", 4], f32>) -> !kiln.tensor<["?", 4], f32>
  return %2 : !kiln.tensor<["?", 4], f32>
}
"""


def run(args, stdin=None):
    return subprocess.run(KILN_OPT + args, input=stdin, capture_output=True, text=True, cwd=ROOT)


def test_stdin_to_stdout_with_pass_flags_in_order():
    r = run(["--kiln-infer-shapes", "--cse"], GOOD)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('"kiln.relu"') == 1  # cse merged the twins
    assert '-> !kiln.tensor<["B", 4], f32>' in r.stdout


def test_pass_pipeline_and_output_file(tmp_path):
    src = tmp_path / "in.mlir"
    src.write_text(GOOD)
    out = tmp_path / "out.mlir"
    r = run([str(src), "--pass-pipeline=builtin.module(kiln-infer-shapes,func.func(cse))", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert out.read_text().count('"kiln.relu"') == 1


def test_print_ir_after_all_goes_to_stderr():
    r = run(["--kiln-infer-shapes", "--canonicalize", "--mlir-print-ir-after-all"], GOOD)
    assert r.returncode == 0
    assert "// -----// IR Dump After kiln-infer-shapes //----- //" in r.stderr
    assert "// -----// IR Dump After canonicalize //----- //" in r.stderr


def test_help_lists_kiln_and_upstream_passes():
    r = run(["--help"])
    assert r.returncode == 0
    for name in ("--kiln-infer-shapes", "--kiln-verify-symbols", "--canonicalize", "--cse"):
        assert name in r.stdout


@pytest.mark.parametrize(
    "args, stdin, message",
    [
        (["--kiln-no-such-pass"], GOOD, "'kiln-no-such-pass' is not a kiln pass or a valid MLIR pass pipeline"),
        (["--pass-pipeline=builtin.module(kiln-infer-shapes"], GOOD, "malformed pass pipeline 'builtin.module(kiln-infer-shapes'"),
        (["--pass-pipeline=builtin.module(func.func(kiln-infer-shapes))"], GOOD, "runs on the module; use it at builtin.module level"),
        (["/no/such/file.mlir"], None, "could not open input file '/no/such/file.mlir'"),
        ([], "func.func @f( {", "<stdin>:1:14: error: expected non-function type"),
        ([], 'func.func @f(%a: !kiln.tensor<["Q"], f32>) { return }', "uses undeclared symbol 'Q'"),
        (["--kiln-infer-shapes=bogus=1"], GOOD, "pass 'kiln-infer-shapes' has no option 'bogus'"),
    ],
)
def test_user_errors_exit_1_with_a_message_and_no_traceback(args, stdin, message):
    r = run(args, stdin)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_error_shows_source_line_and_caret(tmp_path):
    src = tmp_path / "bad.mlir"
    src.write_text('func.func @f(%a: !kiln.tensor<[4], f32>) {\n  %0 = "kiln.exp"(%a, %a) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>\n  return\n}\n')
    r = run([str(src)])
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert lines[0] == f"{src}:2:8: error: 'kiln.exp' op expects 1 operands, got 2"
    assert lines[1].startswith('  %0 = "kiln.exp"')
    assert lines[2] == "       ^"


def test_verify_diagnostics_fails_on_a_wrong_expectation():
    text = 'func.func @f(%a: !kiln.tensor<[4], i32>) {\n  // expected-error @below {{something else}}\n  %0 = "kiln.exp"(%a) : (!kiln.tensor<[4], i32>) -> !kiln.tensor<[4], i32>\n  return\n}\n'
    r = run(["--verify-diagnostics"], text)
    assert r.returncode == 1
    assert 'expected error "something else" was not produced' in r.stderr
    assert "unexpected error: 'kiln.exp' op requires a floating-point operand, got i32" in r.stderr


def test_verify_diagnostics_fails_when_an_expected_error_is_missing():
    text = '// expected-error @below {{boom}}\nfunc.func @f() { return }\n'
    r = run(["--verify-diagnostics"], text)
    assert r.returncode == 1
    assert 'expected error "boom" was not produced' in r.stderr


def test_split_input_file_keeps_line_numbers():
    text = "func.func @a() { return }\n// -----\nfunc.func @b() { return }\n// -----\n\nfunc.func @c() {\n  %0 = \"kiln.exp\"() : () -> !kiln.tensor<[4], f32>\n  return\n}\n"
    r = run(["--split-input-file"], text)
    assert r.returncode == 1
    assert "<stdin>:7:8: error: 'kiln.exp' op expects 1 operands, got 0" in r.stderr
    assert "func.func @a" in r.stdout and "func.func @b" in r.stdout  # good chunks still print
    assert r.stdout.count("// -----") == 1


def _chunks(path):
    return path.read_text().split("\n// -----")


def _lit_files():
    return [p for p in sorted((ROOT / "test").rglob("*.mlir")) if "Output" not in p.parts]


@pytest.mark.parametrize("path", _lit_files(), ids=lambda p: str(p.relative_to(ROOT / "test")))
def test_every_valid_lit_input_round_trips(path):
    """`kiln-opt X | kiln-opt` reproduces the first output, for every chunk that is valid IR."""
    valid = 0
    for chunk in _chunks(path):
        with make_context(torch=True), ir.Location.unknown():
            try:
                first = str(parse_module(chunk, str(path)))
            except KilnError:
                continue  # an invalid-IR case: nothing to round-trip
        # A second process in kiln-opt terms: a fresh context (resource names are per context).
        with make_context(torch=True), ir.Location.unknown():
            second = str(parse_module(first, "first-output"))
        assert second == first
        valid += 1
    if "invalid" not in path.name:
        assert valid > 0, f"{path} has no valid IR chunk"


def test_printed_output_with_aliases_round_trips():
    """Lowered IR begins with `#map = ...` aliases and, with debug info, ends
    with `#loc = ...` ones: both must parse back (`kiln-opt X | kiln-opt`)."""
    text = GOOD
    lowered = run(["--kiln-infer-shapes", "--convert-kiln-to-linalg"], text)
    assert lowered.returncode == 0, lowered.stderr
    assert lowered.stdout.lstrip().startswith("#map")
    again = run([], lowered.stdout)
    assert again.returncode == 0, again.stderr
    assert again.stdout == lowered.stdout
    with_locs = run(["--mlir-print-debuginfo"], text)
    assert "#loc" in with_locs.stdout.rstrip().splitlines()[-1]
    again = run(["--mlir-print-debuginfo"], with_locs.stdout)
    assert again.returncode == 0, again.stderr


def test_alias_preamble_before_bare_ops_keeps_line_numbers():
    text = '#map = affine_map<(d0) -> (d0)>\nfunc.func @f(%a: !kiln.tensor<[4], i32>) {\n  %0 = "kiln.exp"(%a) : (!kiln.tensor<[4], i32>) -> !kiln.tensor<[4], i32>\n  return\n}\n'
    r = run([], text)
    assert r.returncode == 1
    assert "<stdin>:3:8: error: 'kiln.exp' op requires a floating-point operand, got i32" in r.stderr
