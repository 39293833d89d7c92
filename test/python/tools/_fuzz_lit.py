"""Seeded mutation fuzzing of the lit inputs through ``kiln-opt``.

Used by ``test_fuzz_lit_inputs.py`` (a bounded run in the suite) and as a
script for longer runs::

    python test/python/tools/_fuzz_lit.py --count 3000 --seed 1 --repros /tmp/fuzz-repros

A mutant is one ``// -----`` chunk of a ``.mlir`` file under ``test/`` with
one to three seeded mutations (byte flips, token deletions and duplications,
dims, numbers and dtypes changed inside ``!kiln.tensor<...>``, op names
swapped, truncation, bytes that are not UTF-8, lines deleted or duplicated).
Each is run through ``kiln-opt`` with a pipeline taken from its file's RUN
lines or from a fixed set of kiln pipelines (up to LLVM).  The one property
checked is the tool's contract: exit status 0 or 1 — never a signal, never
70 ("internal error", a kiln bug), never a hang.

Starting Python and MLIR costs seconds, so one *driver* process runs a batch
of mutants in-process through ``kiln_opt.main`` with the exit-status rules of
``kiln.tools._cli``, logging ``S id`` before and ``R id status`` after each
mutant to a results file with unbuffered writes.  A signal or a hang kills
the batch: the mutant started and not finished is the culprit (it is rerun
alone to tell a crash of its own from one that earlier mutants set up), and
a fresh driver goes on with the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pathlib
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[3]
LIT_ROOT = ROOT / "test"

# Pipelines tried on every input besides its file's own RUN lines: each kiln
# graph pass alone, the default CPU graph pipeline, the lowering to linalg and
# the whole CPU lowering down to the LLVM dialect.
GENERIC_PIPELINES: list[list[str]] = [
    [],
    ["--kiln-infer-shapes"],
    ["--kiln-verify-symbols"],
    ["--kiln-fold-constants"],
    ["--kiln-simplify"],
    ["--kiln-fuse"],
    ["--kiln-partition"],
    ["--kiln-decompose"],
    ["--kiln-dce"],
    ["--kiln-plan-memory"],
    ["--kiln-infer-shapes", "--canonicalize", "--cse"],
    ["--convert-kiln-to-linalg"],
    ["--pass-pipeline=builtin.module(kiln-default-cpu)"],
    ["--pass-pipeline=builtin.module(kiln-default-triton)"],
    ["--pass-pipeline=builtin.module(kiln-default-cpu,convert-kiln-to-linalg,kiln-cpu-lower)"],
    ["--pass-pipeline=builtin.module(kiln-infer-shapes,kiln-partition,kiln-plan-memory)"],
    ["--pass-pipeline=builtin.module(kiln-infer-shapes,kiln-decompose,kiln-simplify,kiln-fuse,convert-kiln-to-linalg)"],
    ["--pass-pipeline=builtin.module(kiln-infer-shapes,convert-kiln-to-linalg,kiln-cpu-lower)"],
]

_DROP_FLAGS = {"--split-input-file"}  # a mutant is one chunk already


# ---------------------------------------------------------------- corpus


@dataclass
class Seed:
    """One chunk of a lit input and the pipelines its file's RUN lines use."""

    path: str
    index: int
    text: str
    pipelines: list[list[str]]
    env: list[dict[str, str]]


def run_line_pipelines(text: str) -> list[tuple[list[str], dict[str, str]]]:
    """``(kiln-opt arguments after %s, environment)`` of each RUN line."""
    out = []
    for line in text.split("\n"):
        m = re.match(r"\s*//\s*RUN:\s*(.*)", line)
        if not m:
            continue
        try:
            words = shlex.split(m.group(1))
        except ValueError:
            continue
        env: dict[str, str] = {}
        if words[:1] == ["not"]:
            words = words[1:]
        if words[:1] == ["env"]:
            words = words[1:]
            while words and "=" in words[0]:
                k, _, v = words.pop(0).partition("=")
                env[k] = v
        if words[:1] != ["kiln-opt"] or "%s" not in words:
            continue
        args = []
        for w in words[words.index("%s") + 1:]:
            if w in ("|", "2>&1") or w.startswith(">") or w.startswith("2>"):
                break
            if w not in _DROP_FLAGS:
                args.append(w)
        out.append((args, env))
    return out


def load_corpus() -> list[Seed]:
    """Every chunk of every lit input under ``test/`` (outputs excluded)."""
    seeds = []
    for path in sorted(LIT_ROOT.rglob("*.mlir")):
        if "Output" in path.parts or "Inputs" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        runs = run_line_pipelines(text)
        pipelines = [a for a, _ in runs]
        envs = [e for _, e in runs]
        for i, chunk in enumerate(re.split(r"(?m)^// -----.*$", text)):
            if chunk.strip():
                seeds.append(Seed(str(path.relative_to(ROOT)), i, chunk, pipelines, envs))
    return seeds


# ---------------------------------------------------------------- mutations

_TOKEN = re.compile(rb'"(?:[^"\\\n]|\\.)*"|[%@^#!]?[\w.$-]+|\S')
_TENSOR = re.compile(rb"!kiln\.tensor<\[([^\]]*)\],\s*([^>]*)>")
_NUMBER = re.compile(rb"(?<![\w.\"%#^@])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w\"])")
_OP_NAME = re.compile(rb'"kiln\.\w+"')
_QUOTED = re.compile(rb'"[^"\n]*"')

_WEIRD_NUMBERS = [b"0", b"-1", b"1", b"2", b"3", b"-7", b"65536", b"2147483648", b"9223372036854775807",
                  b"9223372036854775808", b"-9223372036854775809", b"99999999999999999999999", b"1.5",
                  b"nan", b"0x10", b"1e308"]
_WEIRD_DIMS = [b'"?"', b'"B"', b'"L"', b'"Z"', b'"B*L"', b'"B+1"', b'"(B-3)/2+1"', b'"B/0"', b'"B**B**B"',
               b'"B*"', b'"("', b'""', b'"-B"', b'"1e9"', b'"B//0"', b'"x" ', b'"' + b"(" * 300 + b'B"',
               b'"' + b"B+" * 200 + b'1"', b'"__import__(\'os\')"', b'"oo"', b'"zoo"', b'"nan"', b'"I"',
               b'"B%0"', b'"Max(B,L)"', b'"B==L"', b'"lambda: 1"', b"0", b"-1", b"1", b"-3",
               b"9223372036854775807", b"99999999999999999999", b"1.5", b"true", b"[]", b"[4]", b"f32",
               b"unit", b'"B"' * 2]
_WEIRD_DTYPES = [b"f32", b"f16", b"bf16", b"f64", b"i1", b"i8", b"i32", b"i64", b"ui8", b"si8", b"i7",
                 b"index", b"complex<f32>", b"none", b"tensor<4xf32>", b"f8E4M3FN", b"i0", b"1", b'"f32"',
                 b"vector<4xf32>", b"!kiln.tensor<[4], f32>"]
_BAD_BYTES = [b"\xff", b"\xc3\x28", b"\xe2\x82", b"\xf0\x9f\x92", b"\xfe\xff", b"\x80", b"\x00", b"\xed\xa0\x80"]


def _flip_byte(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    choice = rng.random()
    if choice < 0.4:
        new = bytes([data[i] ^ (1 << rng.randrange(8))])
    elif choice < 0.8:
        new = bytes([rng.choice(b"()[]{}<>,:;=\"%@!#*+-/?0123456789xBLf \n")])
    else:
        new = bytes([rng.randrange(256)])
    return data[:i] + new + data[i + 1:]


def _tokens(data: bytes) -> list[re.Match]:
    return list(_TOKEN.finditer(data))


def _delete_token(rng, data):
    toks = _tokens(data)
    if not toks:
        return data
    t = rng.choice(toks)
    return data[:t.start()] + data[t.end():]


def _duplicate_token(rng, data):
    toks = _tokens(data)
    if not toks:
        return data
    t = rng.choice(toks)
    return data[:t.end()] + b" " + t.group(0) + data[t.end():]


def _swap_tokens(rng, data):
    toks = _tokens(data)
    if len(toks) < 2:
        return data
    a, b = sorted(rng.sample(range(len(toks)), 2))
    ta, tb = toks[a], toks[b]
    return data[:ta.start()] + tb.group(0) + data[ta.end():tb.start()] + ta.group(0) + data[tb.end():]


def _mutate_tensor(rng, data):
    found = list(_TENSOR.finditer(data))
    if not found:
        return _replace_number(rng, data)
    m = rng.choice(found)
    dims = [d.strip() for d in m.group(1).split(b",")] if m.group(1).strip() else []
    dtype = m.group(2).strip()
    choice = rng.randrange(6)
    if choice == 0 and len(dims) >= 2:
        i, j = rng.sample(range(len(dims)), 2)
        dims[i], dims[j] = dims[j], dims[i]
    elif choice == 1 and dims:
        dims[rng.randrange(len(dims))] = rng.choice(_WEIRD_DIMS)
    elif choice == 2 and dims:
        del dims[rng.randrange(len(dims))]
    elif choice == 3:
        dims.insert(rng.randrange(len(dims) + 1), rng.choice(_WEIRD_DIMS))
    elif choice == 4:
        dtype = rng.choice(_WEIRD_DTYPES)
    else:
        dims = [] if rng.random() < 0.5 else dims * 2
    new = b"!kiln.tensor<[" + b", ".join(dims) + b"], " + dtype + b">"
    # Change every use of the same type (so a consistent change reaches the
    # shape functions, not only the type-mismatch checks) or just this one.
    if rng.random() < 0.5:
        return data.replace(m.group(0), new)
    return data[:m.start()] + new + data[m.end():]


def _replace_number(rng, data):
    found = list(_NUMBER.finditer(data))
    if not found:
        return _flip_byte(rng, data)
    m = rng.choice(found)
    return data[:m.start()] + rng.choice(_WEIRD_NUMBERS) + data[m.end():]


_STATIC_DIM = re.compile(rb"(?<=[\[,] )\d+(?=[,\]])|(?<=\[)\d+(?=[,\]])")
_DIM_VALUES = [b"0", b"1", b"2", b"3", b"7", b"-1", b"2147483648", b"1099511627776", b"4611686018427387904",
               b'"B"', b'"L"', b'"N"',
               b'"B*L"', b'"B+1"']


def _replace_dim_everywhere(rng, data):
    """One static dim value changed in every ``!kiln.tensor`` that has it, so
    the IR mostly stays consistent and reaches the shape functions and passes."""
    values = sorted({m.group(0) for t in _TENSOR.finditer(data) for m in _STATIC_DIM.finditer(t.group(0))})
    if not values:
        return _mutate_tensor(rng, data)
    old, new = rng.choice(values), rng.choice(_DIM_VALUES)

    def fix(t):
        return _STATIC_DIM.sub(lambda m: new if m.group(0) == old else m.group(0), t.group(0))

    return _TENSOR.sub(fix, data)


def _rename_symbol(rng, data):
    """A symbol name replaced everywhere (two symbols merged, or a new one)."""
    names = sorted(set(re.findall(rb'sym_name = "(\w+)"', data)))
    if not names:
        return _replace_number(rng, data)
    old = rng.choice(names)
    new = rng.choice([n for n in names if n != old] + [b"Q", b"B", b"x", b"_"])
    return re.sub(rb'(?<=["*+/(\-])' + old + rb'(?=["*+/)\-])', new, data)


_ATTR_ENTRY = re.compile(rb"(?:(?<=\{)|(?<=, ))([a-z_]\w*) = ((?:\[[^\]]*\]|array<[^>]*>|\"[^\"]*\"|[^,}{\[]+?))(?=[,}])")
_WEIRD_ATTRS = [b"0 : i64", b"-1 : i64", b"99 : i64", b"9223372036854775807 : i64", b"-9223372036854775808 : i64",
                b"1 : i32", b"1 : i1", b"true", b"unit", b"1.5 : f32", b"0x7FC00000 : f32", b'"x"', b'""',
                b"[]", b"[1, 2]", b'["B", 4]', b'["?"]', b"[-1]", b"array<i64>", b"array<i64: 0, 0>",
                b"array<i64: -1>", b"array<i64: 9223372036854775807>", b"array<i32: 1, 1>", b"f32", b"i64",
                b"{}", b"{a = 1}", b"dense<1.0> : tensor<f32>", b"dense<> : tensor<0xf32>", b"@sym",
                b"affine_map<(d0) -> (d0)>", b"[[1]]"]


def _mutate_attribute(rng, data):
    """An attribute's value replaced by one of another kind or range."""
    found = list(_ATTR_ENTRY.finditer(data))
    if not found:
        return _replace_number(rng, data)
    m = rng.choice(found)
    return data[:m.start(2)] + rng.choice(_WEIRD_ATTRS) + data[m.end(2):]


def _swap_op_name(rng, data):
    found = list(_OP_NAME.finditer(data))
    if not found:
        return _delete_token(rng, data)
    m = rng.choice(found)
    return data[:m.start()] + rng.choice(_OP_NAMES) + data[m.end():]


def _swap_string(rng, data):
    found = list(_QUOTED.finditer(data))
    if len(found) < 2:
        return _delete_token(rng, data)
    m, other = rng.sample(found, 2)
    return data[:m.start()] + other.group(0) + data[m.end():]


def _truncate(rng, data):
    return data[:rng.randrange(len(data) + 1)]


def _bad_bytes(rng, data):
    i = rng.randrange(len(data) + 1)
    return data[:i] + rng.choice(_BAD_BYTES) + data[i:]


def _edit_line(rng, data):
    lines = data.split(b"\n")
    if len(lines) < 2:
        return data
    i = rng.randrange(len(lines))
    choice = rng.randrange(3)
    if choice == 0:
        del lines[i]
    elif choice == 1:
        lines.insert(i, lines[i])
    else:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


# Weighted: the structured mutations reach the verifiers and passes; the
# byte-level ones mostly the parser (and the UTF-8 check), so fewer of them.
MUTATIONS = [
    (_flip_byte, 2), (_delete_token, 3), (_duplicate_token, 2), (_swap_tokens, 1), (_mutate_tensor, 6),
    (_replace_number, 4), (_swap_op_name, 2), (_swap_string, 2), (_truncate, 1), (_bad_bytes, 1),
    (_edit_line, 3), (_replace_dim_everywhere, 6), (_rename_symbol, 2), (_mutate_attribute, 6),
]
_OP_NAMES: list[bytes] = []


# ---------------------------------------------------------------- structured mutations
#
# Text mutations mostly stop at the parser or at a verifier's type check.  To
# reach the shape functions and the passes, these parse a seed, change one
# kiln op through the bindings (an attribute set to a value of another kind or
# range, or removed; an operand swapped for a function argument) and forget
# its result dims ("?", which every verifier accepts), then print the module.

_STRUCT_ATTRS = [
    "0 : i64", "1 : i64", "-1 : i64", "2 : i64", "-2 : i64", "3 : i64", "7 : i64", "-9 : i64", "64 : i64",
    "9223372036854775807 : i64", "-9223372036854775808 : i64", "4611686018427387904 : i64", "1 : i32",
    "true", "false", "unit", "0.0 : f64", "-1.0 : f32", "1.0e+38 : f64", "0x7FF0000000000000 : f64",
    '"x"', '""', '"B"', '"tanh"', '"none"', '"reflect"', '"edge"', "[]", "[0]", "[1, 2]", '["B", 4]', '["?"]',
    "[-1]", '["B*L"]', "[0, 0]", "array<i64>", "array<i64: 0>", "array<i64: -1>", "array<i64: 1, 0>",
    "array<i64: 0, 1, 2, 3>", "array<i64: 5, 5>", "array<i64: 0, 0>", "array<i64: -5>",
    "array<i64: 9223372036854775807>", "array<i64: 1, 1, 1, 1, 1, 1, 1, 1>", "array<i32: 1, 1, 1, 1>",
    "array<i32: 1, 0, 0, 0>", "array<i32: 2, 1, 1, 0>", "array<i32: -1, 1, 1, 1>", "f32", "i64", "{}",
    "dense<1.0> : tensor<f32>", "dense<0> : tensor<2xi64>", "dense<[[1.0, 2.0]]> : tensor<1x2xf32>",
    "dense<> : tensor<0xf32>", "dense<1.0> : tensor<4x4xf32>", "dense<true> : tensor<2xi1>", "@B",
]


def _unknown_dims_type(t):
    """``t`` with every dim ``?`` (same rank and dtype), when it is a kiln tensor."""
    from kiln.dialects.kiln import TensorType, tensor_info, tensor_type

    if not isinstance(t, TensorType):
        return None
    info = tensor_info(t)
    return tensor_type(["?"] * info.rank, info.dtype)


def _structured_mutant(rng: random.Random, text: str, ctx) -> bytes | None:
    """One op of ``text`` changed through the bindings, or None when the text
    does not parse or has no kiln op."""
    from kiln._mlir import ir

    try:
        module = ir.Module.parse(text)
    except Exception:  # an invalid.mlir chunk: text mutations only
        return None
    ops = []

    def visit(op):
        if op.name.startswith("kiln.") and op.name not in ("kiln.yield",):
            ops.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if not ops:
        return None
    op = rng.choice(ops)
    names = [a if isinstance(a, str) else a.name for a in op.attributes]
    choice = rng.random()
    try:
        if names and choice < 0.6:
            op.attributes[rng.choice(names)] = ir.Attribute.parse(rng.choice(_STRUCT_ATTRS))
        elif names and choice < 0.75:
            del op.attributes[rng.choice(names)]
        elif op.operands:
            fn = op.parent
            while fn is not None and fn.name != "func.func":
                fn = fn.parent
            args = list(fn.regions[0].blocks[0].arguments) if fn is not None else []
            if args:
                op.operands[rng.randrange(len(op.operands))] = rng.choice(args)
        if rng.random() < 0.8:
            for r in op.results:
                new = _unknown_dims_type(r.type)
                if new is not None:
                    r.set_type(new)
    except Exception:
        return None
    return module.operation.get_asm(assume_verified=True, print_generic_op_form=False).encode()


@dataclass
class Job:
    """One mutant and the kiln-opt arguments to run it with."""

    id: int
    seed: str
    mutations: list[str]
    args: list[str]
    env: dict[str, str]
    path: str = ""
    data: bytes = b""


def ir_location_unknown():
    """``ir.Location.unknown()`` of the current context."""
    from kiln._mlir import ir

    return ir.Location.unknown()


def make_jobs(count: int, seed: int, workdir: str, corpus: list[Seed] | None = None,
              structured_share: float = 0.5) -> list[Job]:
    """``count`` seeded mutants, written under ``workdir``; about
    ``structured_share`` of them changed through the bindings, the rest as text."""
    from kiln.context import make_context

    corpus = load_corpus() if corpus is None else corpus
    _OP_NAMES[:] = sorted({m.group(0) for s in corpus for m in _OP_NAME.finditer(s.text.encode())})
    rng = random.Random(seed)
    names = [f for f, _ in MUTATIONS]
    weights = [w for _, w in MUTATIONS]
    jobs = []
    ctx = make_context(torch=True)
    for i in range(count):
        s = rng.choice(corpus)
        data = s.text.encode()
        applied = []
        structured = None
        if rng.random() < structured_share:
            with ctx, ir_location_unknown():
                structured = _structured_mutant(rng, s.text, ctx)
        if structured is not None:
            data = structured
            applied.append("structured")
            extra = rng.choices(names, weights, k=rng.choice((0, 0, 0, 1)))
        else:
            extra = rng.choices(names, weights, k=rng.choice((1, 1, 2, 3)))
        for f in extra:
            data = f(rng, data)
            applied.append(f.__name__.lstrip("_"))
        # Every other mutant takes the next of kiln's pipelines in turn (so a
        # short run still tries each), the others one of its file's RUN lines.
        if i % 2 == 0 or not s.pipelines:
            args, env = GENERIC_PIPELINES[(i // 2) % len(GENERIC_PIPELINES)], {}
        else:
            k = rng.randrange(len(s.pipelines))
            args, env = s.pipelines[k], s.env[k]
        path = os.path.join(workdir, f"mutant-{i:05d}.mlir")
        with open(path, "wb") as f:
            f.write(data)
        jobs.append(Job(i, f"{s.path}#{s.index}", applied, [path, *args], env, path, data))
    return jobs


# ---------------------------------------------------------------- driver (in the child)


_ARMED: list[bool] = []


def _self_test(env: dict[str, str]) -> None:
    """Misbehave as a job's environment asks: how the tests check that the
    runner catches signals, hangs and internal errors."""
    what = env.get("KILN_FUZZ_SELF_TEST")
    if what == "arm":  # sets up a crash of a later job in the same process
        _ARMED.append(True)
    if what == "signal" or (what == "signal-if-armed" and _ARMED):
        os.kill(os.getpid(), signal.SIGSEGV)
    elif what == "hang":
        time.sleep(3600)
    elif what == "raise":
        raise RuntimeError("a bug in kiln (self-test)")


def _driver(jobs_file: str, results_file: str) -> int:
    """Run the jobs in ``jobs_file`` in-process, logging to ``results_file``."""
    from kiln.tools import _cli, kiln_opt

    jobs = json.loads(pathlib.Path(jobs_file).read_text())
    fd = os.open(results_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    log("READY")
    for job in jobs:
        saved = {k: os.environ.get(k) for k in job["env"]}
        os.environ.update(job["env"])
        log(f"S {job['id']}")
        start = time.perf_counter()
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                _self_test(job["env"])
                status = kiln_opt.main(job["args"])
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else 1
            except Exception as e:  # exactly what the console script would exit with
                status = _cli.report_exception("kiln-opt", e)
                if status == _cli.EXIT_INTERNAL_ERROR:
                    err.write(traceback.format_exc())
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if status not in (0, 1):
            log(f"E {job['id']} " + json.dumps(err.getvalue()[-4000:]))
        elif status == 1:  # the first line, for statistics of where mutants stop
            log(f"E {job['id']} " + json.dumps(err.getvalue().lstrip().split("\n", 1)[0][:300]))
        log(f"R {job['id']} {status} {time.perf_counter() - start:.3f}")
    os.close(fd)
    return 0


# ---------------------------------------------------------------- runner (in the parent)


@dataclass
class Outcome:
    """What happened to one mutant: ``status`` is the exit status kiln-opt
    would give, ``-N`` for signal N, or ``"hang"``."""

    job: Job
    status: int | str
    seconds: float = 0.0
    detail: str = ""
    alone: bool | None = None  # whether a crash or hang reproduces with the mutant alone
    upstream: bool = False  # MLIR's own parser crashes on the text (or the culprit's and this) too
    before: list = field(default_factory=list)  # the jobs its driver ran before it
    culprit: Job | None = None  # the earlier job that sets up a crash not reproduced alone

    @property
    def ok(self) -> bool:
        """Exit status 0 or 1: the contract holds."""
        return self.status in (0, 1)

    @property
    def kiln_bug(self) -> bool:
        """A broken contract that is kiln's to fix (not MLIR's parser)."""
        return not self.ok and not self.upstream


@dataclass
class Batch:
    """The outcomes of a fuzz run and the driver restarts it took."""

    outcomes: dict[int, Outcome] = field(default_factory=dict)
    restarts: int = 0

    @property
    def failures(self) -> list[Outcome]:
        """Outcomes that break the contract, in mutant order."""
        return [o for _, o in sorted(self.outcomes.items()) if not o.ok]

    @property
    def kiln_failures(self) -> list[Outcome]:
        """The failures that MLIR's parser alone does not have."""
        return [o for o in self.failures if o.kiln_bug]


def upstream_opt() -> str | None:
    """The ``torch-mlir-opt`` binary of the bindings kiln uses, if present."""
    import torch_mlir

    for base in getattr(torch_mlir, "__path__", []):  # a namespace package: no __file__
        path = pathlib.Path(base) / "_mlir_libs" / "torch-mlir-opt"
        if path.exists():
            return str(path)
    return None


def upstream_parser_crashes(data: bytes, timeout: float = 30.0) -> bool:
    """Whether MLIR's own parser and verifier (``torch-mlir-opt`` with no
    passes, kiln's dialect left unregistered) die of a signal on ``data``:
    such a crash is MLIR's bug, reported upstream, not kiln's."""
    opt = upstream_opt()
    if opt is None:
        return False
    try:
        r = subprocess.run([opt, "--allow-unregistered-dialect", "-"], input=data, capture_output=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return True
    return r.returncode < 0 or r.returncode > 128


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KILN_DEBUG", None)
    env.update(extra or {})
    return env


def _start(jobs: list[Job], workdir: str, tag: str, env: dict[str, str]):
    jobs_file = os.path.join(workdir, f"jobs-{tag}.json")
    results = os.path.join(workdir, f"results-{tag}.txt")
    errlog = os.path.join(workdir, f"stderr-{tag}.txt")
    payload = [{"id": j.id, "args": j.args, "env": j.env} for j in jobs]
    pathlib.Path(jobs_file).write_text(json.dumps(payload))
    pathlib.Path(results).write_text("")
    with open(errlog, "wb") as err:
        proc = subprocess.Popen([sys.executable, __file__, "--driver", jobs_file, results],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                env=env, start_new_session=True)
    return proc, results, errlog


def _tail(path: str, n: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_jobs(jobs: list[Job], workdir: str, *, timeout: float = 30.0, startup_timeout: float = 120.0,
             env: dict[str, str] | None = None, confirm: bool = True, log=None) -> Batch:
    """Run ``jobs`` in driver processes; every job gets an :class:`Outcome`."""
    batch = Batch()
    child_env = _child_env(env)
    pending = list(jobs)
    by_id = {j.id: j for j in jobs}
    while pending:
        tag = f"{batch.restarts:04d}"
        proc, results, errlog = _start(pending, workdir, tag, child_env)
        current, started, ready_at, seen = None, None, None, 0
        errors: dict[int, str] = {}
        t0 = time.monotonic()
        hung = False
        while True:
            with open(results) as f:
                lines = f.read().split("\n")[:-1]
            for line in lines[seen:]:
                kind, _, rest = line.partition(" ")
                if kind == "READY":
                    ready_at = time.monotonic()
                elif kind == "S":
                    current, started = int(rest), time.monotonic()
                elif kind == "E":
                    jid, _, text = rest.partition(" ")
                    errors[int(jid)] = json.loads(text)
                elif kind == "R":
                    jid, status, secs = rest.split()
                    jid = int(jid)
                    batch.outcomes[jid] = Outcome(by_id[jid], int(status), float(secs), errors.get(jid, ""))
                    current = None
            seen = len(lines)
            if proc.poll() is not None:
                break
            now = time.monotonic()
            if current is not None and now - started > timeout:
                hung = True
                _kill(proc)
                break
            if ready_at is None and now - t0 > startup_timeout:
                _kill(proc)
                raise RuntimeError(f"the fuzz driver did not start in {startup_timeout} s:\n{_tail(errlog)}")
            time.sleep(0.02)
        done_ids = set(batch.outcomes)
        if current is not None:
            job = by_id[current]
            status = "hang" if hung else proc.returncode
            batch.outcomes[current] = Outcome(job, status, 0.0, _tail(errlog))
            # What ran before it in this driver: where to look for a culprit.
            batch.outcomes[current].before = [j for j in pending if j.id in done_ids]
            if log:
                log(f"mutant {current}: {status} ({job.seed} {job.mutations} {shlex.join(job.args[1:])})")
        elif proc.returncode != 0 and ready_at is None:
            raise RuntimeError(f"the fuzz driver failed to start (status {proc.returncode}):\n{_tail(errlog)}")
        elif proc.returncode != 0:
            # Died between mutants (at exit, say): blame the last one run.
            last = max((j.id for j in pending if j.id in done_ids), default=pending[0].id)
            batch.outcomes[last] = Outcome(by_id[last], proc.returncode, 0.0, _tail(errlog))
        pending = [j for j in pending if j.id not in batch.outcomes]
        for name in (results, errlog, os.path.join(workdir, f"jobs-{tag}.json")):
            with contextlib.suppress(OSError):
                os.remove(name)
        if pending:
            batch.restarts += 1
    if confirm:
        for o in batch.failures:
            if o.status == 70:
                continue  # an exception: it reproduces alone by construction
            again = run_jobs([o.job], workdir, timeout=timeout, env=env, confirm=False)
            o.alone = not again.outcomes[o.job.id].ok
            if o.alone:
                o.upstream = upstream_parser_crashes(o.job.data, timeout)
            elif o.before:
                # Something earlier in the same process set the crash up (a
                # corrupted heap): find it, then see whether MLIR's parser
                # alone does the same with those two texts.
                o.culprit = find_culprit(o.job, o.before, workdir, timeout=timeout, env=env)
                if o.culprit is not None:
                    o.upstream = upstream_parse_sequence_crashes([o.culprit.data, o.job.data], timeout)
    return batch


def find_culprit(victim: Job, before: list[Job], workdir: str, *, timeout: float, env) -> Job | None:
    """The one job of ``before`` after which ``victim`` crashes, by halving
    the jobs run before it (None when no single job does it)."""

    def crashes(prefix: list[Job]) -> bool:
        b = run_jobs([*prefix, victim], workdir, timeout=timeout, env=env, confirm=False)
        return not b.outcomes[victim.id].ok

    if before and crashes(before[-1:]):  # usually the mutant just before it
        return before[-1]
    candidates = list(before)
    if not candidates or not crashes(candidates):
        return None
    while len(candidates) > 1:
        half = len(candidates) // 2
        if crashes(candidates[half:]):
            candidates = candidates[half:]
        elif crashes(candidates[:half]):
            candidates = candidates[:half]
        else:
            return None  # it takes several of them together
    return candidates[0]


_PARSE_SEQUENCE = """
import sys
from kiln._mlir import ir
from kiln.context import make_context
texts = [open(p, encoding="utf-8", errors="replace").read() for p in sys.argv[1:]]
for _ in range(3):
    for text in texts:
        with make_context(torch=True) as ctx:
            ctx.allow_unregistered_dialects = True
            try:
                ir.Module.parse(text)
            except Exception:
                pass
"""


def upstream_parse_sequence_crashes(texts: list[bytes], timeout: float = 60.0) -> bool:
    """Whether parsing ``texts`` in turn, in one process, with nothing of kiln
    but its dialect registered (no kiln verifier-free path, no pass), dies of
    a signal: a heap corrupted by MLIR's own parser."""
    with tempfile.TemporaryDirectory(prefix="kiln-fuzz-seq-") as d:
        paths = []
        for i, t in enumerate(texts):
            path = os.path.join(d, f"{i}.mlir")
            with open(path, "wb") as f:
                f.write(t)
            paths.append(path)
        try:
            r = subprocess.run([sys.executable, "-c", _PARSE_SEQUENCE, *paths], capture_output=True,
                               timeout=timeout, env=_child_env())
        except subprocess.TimeoutExpired:
            return False
    return r.returncode < 0 or r.returncode > 128


def exit_status_of_signal(status) -> str:
    """``status`` in words (``SIGSEGV`` for -11)."""
    if isinstance(status, int) and status < 0:
        try:
            return signal.Signals(-status).name
        except ValueError:
            return f"signal {-status}"
    return str(status)


def describe(o: Outcome) -> str:
    """One paragraph about a failed mutant: what, from which input, how to rerun it."""
    alone = "" if o.alone is None else (" (reproduces alone)" if o.alone else " (only after earlier mutants)")
    if o.culprit is not None:
        alone += f" (after mutant {o.culprit.id}: {o.culprit.seed} {o.culprit.mutations})"
    if o.upstream:
        alone += " (MLIR's parser crashes on it too: upstream)"
    cmd = "kiln-opt " + shlex.join(o.job.args)
    detail = "\n    ".join(o.detail.strip().splitlines()[-12:])
    return (f"mutant {o.job.id} of {o.job.seed} {o.job.mutations}: {exit_status_of_signal(o.status)}{alone}\n"
            f"  {cmd}\n    {detail}")


def save_repro(o: Outcome, directory: str) -> str:
    """Copy the mutant to ``directory`` with a ``.cmd`` file; returns its path."""
    os.makedirs(directory, exist_ok=True)
    base = os.path.join(directory, f"mutant-{o.job.id:05d}-{exit_status_of_signal(o.status)}")
    with open(base + ".mlir", "wb") as f:
        f.write(o.job.data)
    if o.culprit is not None:
        with open(base + "-culprit.mlir", "wb") as f:
            f.write(o.culprit.data)
    with open(base + ".txt", "w") as f:
        env = " ".join(f"{k}={v}" for k, v in o.job.env.items())
        f.write(f"{(env + ' ') if env else ''}kiln-opt {shlex.join([base + '.mlir', *o.job.args[1:]])}\n")
        f.write(describe(o) + "\n")
    return base + ".mlir"


def main(argv=None) -> int:
    """The script: a longer fuzz run, printing failures and saving repros."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds one mutant may take")
    p.add_argument("--repros", help="save failing mutants here")
    p.add_argument("--driver", nargs=2, metavar=("JOBS", "RESULTS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.driver:
        return _driver(*args.driver)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kiln-fuzz-") as workdir:
        jobs = make_jobs(args.count, args.seed, workdir)
        batch = run_jobs(jobs, workdir, timeout=args.timeout, log=lambda s: print(s, flush=True))
        counts: dict[str, int] = {}
        for o in batch.outcomes.values():
            key = exit_status_of_signal(o.status)
            counts[key] = counts.get(key, 0) + 1
        print(f"{len(jobs)} mutants in {time.monotonic() - start:.1f} s, {batch.restarts} restarts: {counts}")
        for o in batch.failures:
            print(describe(o))
            if args.repros:
                print("  saved", save_repro(o, args.repros))
    return 1 if batch.kiln_failures else 0


if __name__ == "__main__":
    sys.exit(main())
