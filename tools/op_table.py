"""The supported-op table (``docs/ops.md``), generated from kiln's pattern tables.

    python -m kiln.tools.op_table [-o docs/ops.md] [--check]

Read from the code, not written by hand:

* the torch and ONNX pattern tables of ``convert-torch-to-kiln``
  (:data:`~kiln.conversions.torch_to_kiln.PATTERNS`, keyed by source op):
  each pattern's source is parsed (:mod:`ast`) for the kiln ops it builds
  (``cx.build("matmul", ...)``, the name bound in a closure such as
  ``_binary("add")``, or in a helper it calls with ``cx``), the casts and
  constants it may add (``cx.cast``, ``cx.like``, ``cx.const``), whether it
  folds its inputs at import time (returns a ``Known``), and the reasons it
  declines (``raise Decline("...")``: that op then falls back);
* each kiln op's implementations, one table per op family
  (:func:`kiln.implementations.table`: the numpy reference, the
  kiln-to-linalg lowering, the native library kernels, the Triton kernel
  kind, the PyTorch kernel, ``kiln-decompose``'s rewrite).

``--check`` exits 1 when the file differs from what the tables give (the
test suite runs it, so the committed table stays current).  A pattern whose
kiln op cannot be read from its source (``cx.build(some_expression)``) is an
error naming it: give the name as a literal, a closure variable or a local
bound to literals.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PatternInfo", "analyze_pattern", "generate", "main"]

#: Where the table lives, relative to the repository (package) root.
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "docs" / "ops.md"
#: The package whose helpers are followed when a pattern calls them with ``cx``.
_PATTERN_PACKAGE = "kiln.conversions.torch_to_kiln"
#: ``cx`` methods that may add an op besides the pattern's own: the op they add.
_AUX = {"cast": "kiln.cast", "like": "kiln.constant", "const": "kiln.constant"}


@dataclass
class PatternInfo:
    """What one pattern function may do, as read from its source."""

    ops: list[str] = field(default_factory=list)  # kiln ops it builds, in source order
    aux: list[str] = field(default_factory=list)  # kiln.cast / kiln.constant it may add
    folds: bool = False  # returns an import-time value (Known) for known inputs
    declines: list[str] = field(default_factory=list)  # why it may decline (the op falls back)

    def merge(self, other: PatternInfo) -> None:
        """Add ``other``'s findings (a helper's) to these."""
        for mine, theirs in ((self.ops, other.ops), (self.aux, other.aux), (self.declines, other.declines)):
            mine.extend(x for x in theirs if x not in mine)
        self.folds = self.folds or other.folds


def _message(node: ast.expr) -> str:
    """A Decline message as text (an f-string's fields as ``…``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    return "…"


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _takes_cx(fn) -> bool:
    try:
        return "cx" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _is_helper(obj) -> bool:
    return (inspect.isfunction(obj) and obj.__name__ != "<lambda>"
            and getattr(obj, "__module__", "").startswith(_PATTERN_PACKAGE) and _takes_cx(obj))


_UNKNOWN = object()


def _value(node: ast.expr, env: dict):
    """The value of a literal, a bound name, ``cx.name`` or ``cx.name.endswith("...")``; else _UNKNOWN."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id, _UNKNOWN)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cx":
        return env.get(f"cx.{node.attr}", _UNKNOWN)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_value(e, env) for e in node.elts]
        return _UNKNOWN if any(i is _UNKNOWN for i in items) else tuple(items)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("endswith", "startswith") and len(node.args) == 1 and not node.keywords):
        obj, arg = _value(node.func.value, env), _value(node.args[0], env)
        if isinstance(obj, str) and isinstance(arg, (str, tuple)):
            return getattr(obj, node.func.attr)(arg)
    return _UNKNOWN


_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b, ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b}


def _decide(test: ast.expr, env: dict):
    """True / False for a test on bound values (``kind == "reduce_min"``,
    ``"Average" in cx.name``, ``with_alpha and ...``), None when it cannot be told."""
    if isinstance(test, ast.BoolOp):
        values = [_decide(v, env) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in values else (True if all(v is True for v in values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        v = _decide(test.operand, env)
        return None if v is None else not v
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _COMPARE:
        left, right = _value(test.left, env), _value(test.comparators[0], env)
        if left is _UNKNOWN or right is _UNKNOWN:
            return None
        try:
            return bool(_COMPARE[type(test.ops[0])](left, right))
        except TypeError:
            return None
    v = _value(test, env)
    return None if v is _UNKNOWN else bool(v)


class _Reader:
    """Reads one function's source with some of its names bound to constants."""

    def __init__(self, fn, env: dict, info: PatternInfo, seen: set):
        self.fn, self.info, self.seen = fn, info, seen
        free = inspect.getclosurevars(fn)
        self.scope = {**fn.__globals__, **free.nonlocals}
        consts = {k: v for k, v in free.nonlocals.items() if isinstance(v, (str, bool, int, float, type(None)))}
        self.env = {**consts, **env}
        self.where = f"{fn.__module__}.{fn.__qualname__}"
        self.func = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        self.local_strings: dict[str, list[str]] = {}
        for node in ast.walk(self.func):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.local_strings.setdefault(target.id, []).extend(self.results(node.value))

    def results(self, node: ast.expr) -> list[str]:
        """The strings an expression may evaluate to (literals, through ``a if t else b``)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.IfExp):
            taken = _decide(node.test, self.env)
            if taken is not None:
                return self.results(node.body if taken else node.orelse)
            return self.results(node.body) + self.results(node.orelse)
        v = _value(node, self.env)
        return [v] if isinstance(v, str) else []

    def run(self) -> None:
        self.block(self.func.body)

    def block(self, stmts: list) -> bool:
        """Read statements in order; True when the block surely ends (return / raise)."""
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                taken = _decide(stmt.test, self.env)
                if taken is None:
                    self.expr(stmt.test)
                    self.block(stmt.body)
                    self.block(stmt.orelse)
                elif self.block(stmt.body if taken else stmt.orelse):
                    return True
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            bodies = [getattr(stmt, k) for k in ("body", "orelse", "finalbody") if isinstance(getattr(stmt, k, None), list)]
            bodies += [h.body for h in getattr(stmt, "handlers", [])]
            if bodies:
                for child in ast.iter_child_nodes(stmt):
                    if isinstance(child, ast.expr):
                        self.expr(child)
                for b in bodies:
                    self.block(b)
                continue
            self.expr(stmt)
            if isinstance(stmt, (ast.Return, ast.Raise)):
                return True
        return False

    def op_names(self, arg: ast.expr) -> list[str]:
        names = self.results(arg)
        if not names and isinstance(arg, ast.Name):
            names = self.local_strings.get(arg.id, [])
        if not names:
            raise ValueError(f"op_table: cannot tell which kiln op {self.where} builds: "
                             f"cx.build({ast.unparse(arg)}, ...)")
        return names

    def bound(self, target, call: ast.Call) -> dict:
        """The constant arguments of ``call`` (literals or bound names), by ``target``'s parameter names."""
        params = list(inspect.signature(target).parameters)
        env = {p: _value(a, self.env) for p, a in zip(params, call.args)}
        env.update({k.arg: _value(k.value, self.env) for k in call.keywords if k.arg})
        env = {k: v for k, v in env.items() if v is not _UNKNOWN}
        if "cx.name" in self.env:
            env["cx.name"] = self.env["cx.name"]
        return env

    def follow(self, target, env: dict) -> None:
        key = (target, tuple(sorted(env.items(), key=repr)))
        if key not in self.seen:
            self.seen.add(key)
            _Reader(target, env, self.info, self.seen).run()

    def expr(self, node: ast.AST, argument: bool = False) -> None:
        """Read an expression (or simple statement), outer calls first; a
        decidable ``a if t else b`` reads only the branch taken.  ``argument``:
        ``node`` is passed to a call (a ``Known`` built there is handed on,
        not the pattern's import-time result)."""
        info = self.info
        if isinstance(node, ast.IfExp):
            taken = _decide(node.test, self.env)
            if taken is not None:
                self.expr(node.body if taken else node.orelse, argument)
                return
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "Decline":
                msg = _message(node.args[0]) if node.args else "…"
                if msg not in info.declines:
                    info.declines.append(msg)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "cx":
                if f.attr == "build" and node.args:
                    for name in self.op_names(node.args[0]):
                        if f"kiln.{name}" not in info.ops:
                            info.ops.append(f"kiln.{name}")
                elif f.attr in _AUX and _AUX[f.attr] not in info.aux:
                    info.aux.append(_AUX[f.attr])
            elif isinstance(f, ast.Attribute) and f.attr == "materialize" and "kiln.constant" not in info.aux:
                info.aux.append("kiln.constant")  # cx.conv.materialize(Known(...))
            elif isinstance(f, ast.Name):
                if f.id == "Known" and not argument:
                    info.folds = True
                target = self.scope.get(f.id)
                if _is_helper(target):
                    self.follow(target, self.bound(target, node))
            elif isinstance(f, ast.Call) and isinstance(f.func, ast.Name):
                # A factory called for its pattern: _variadic("add")(cx).
                factory = self.scope.get(f.func.id)
                args = [_value(a, self.env) for a in f.args]
                if (inspect.isfunction(factory) and factory.__module__.startswith(_PATTERN_PACKAGE)
                        and _UNKNOWN not in args and not f.keywords):
                    made = factory(*args)
                    if _is_helper(made):
                        self.follow(made, {k: v for k, v in self.env.items() if k == "cx.name"})
        for child in ast.iter_child_nodes(node):
            self.expr(child, isinstance(node, ast.Call) and child is not node.func)


def analyze_pattern(fn, source: str | None = None) -> PatternInfo:
    """:class:`PatternInfo` of a pattern function (closures and helpers called
    with ``cx`` followed); with ``source`` (the op name it is registered
    under), tests of ``cx.name`` are decided for that op."""
    info = PatternInfo()
    env = {"cx.name": source} if source else {}
    _Reader(fn, env, info, {(fn, ())}).run()
    return info


def _code(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(source: str, info: PatternInfo, structural: bool) -> str:
    ops, aux = list(info.ops), [a for a in info.aux if a not in info.ops]
    if not ops and aux:
        ops, aux = aux, []
    if ops:
        becomes = _code(ops) + (f" (may add {_code(aux)})" if aux else "")
    elif info.folds:
        becomes = "folded at import time"
    elif structural:
        becomes = "bookkeeping: no kiln op"
    else:
        becomes = "no kiln op (its input passes through)"
    notes = []
    if info.folds and ops:
        notes.append("May be folded at import time")
    if info.declines:
        notes.append("Falls back: " + "; ".join(info.declines))
    return f"| `{source}` | {becomes} | {_cell('. '.join(notes))} |"


def _source_table(patterns: dict, prefix: str, structural: set) -> list[str]:
    rows = ["| source op | kiln op(s) | notes |", "|---|---|---|"]
    for name in sorted(patterns):
        rows.append(_row(name.removeprefix(prefix), analyze_pattern(patterns[name], name), name in structural))
    return rows


def _kiln_tables() -> list[str]:
    """One table per op family, each op's implementations side by side (:func:`kiln.implementations.table`)."""
    from ..dialects.kiln import OPS
    from ..implementations import table

    lines = []
    for family, rows in table().items():
        lines += [f"### {family}", "",
                  "| kiln op | numpy | CPU generated | CPU native | Triton | PyTorch | kiln-decompose | what it does |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in rows:
            doc = (inspect.getdoc(OPS[row.op]) or "").split("\n\n")[0].replace("\n", " ")
            native = ", ".join(f"`{n.removesuffix(' (epilogue)')}`" + (" (epilogue)" if n.endswith("(epilogue)") else "")
                               for n in row.native) or "—"
            triton = {None: "—", "pointwise": "pointwise / epilogue", "view": "view (host side)"}.get(
                row.triton, f"`{row.triton}`")
            cells = ["reference" if row.numpy else "—", "lowered" if row.generated else "—", native, triton,
                     "torch kernel" if row.torch else "—", "into primitives" if row.decompose else "—"]
            lines.append(f"| `{row.op}` | {' | '.join(cells)} | {_cell(doc)} |")
        lines.append("")
    return lines


def generate() -> str:
    """The text of ``docs/ops.md``, from the tables as they are now."""
    from ..conversions.torch_to_kiln import PATTERNS
    from ..conversions.torch_to_kiln.driver import STRUCTURAL

    torch_patterns = {k: v for k, v in PATTERNS.items() if not k.startswith("onnx.")}
    onnx_patterns = {k: v for k, v in PATTERNS.items() if k.startswith("onnx.")}
    lines = [
        "# Supported ops",
        "",
        "<!-- Generated by `python -m kiln.tools.op_table` from kiln's pattern tables: do not edit by hand.",
        "     test/python/test_docs.py fails when this file is stale. -->",
        "",
        "What `kiln.import_torch` / `kiln.import_onnx` (and so `kiln.compile`) turn each source op into,",
        "read from the patterns of `convert-torch-to-kiln` (`conversions/torch_to_kiln/`), and how each",
        "kiln op is then lowered. *kiln op(s)* lists every kiln op a pattern may build (an op such as",
        "`torch.aten.clamp` builds some of them, depending on its arguments); casts and constants it adds",
        "for dtypes and scalars are in parentheses. *Falls back* gives the cases a pattern declines.",
        "",
        "A torch op with no pattern here, or one whose pattern declines, becomes a `kiln.fallback` op and",
        "runs in PyTorch eager (the import report and `compiled.report()` count them); `fallback=False`",
        "makes it an `UnsupportedError` naming the op and its location. An ONNX op with no pattern has no",
        "PyTorch kernel to fall back to: compiling it is an `UnsupportedError` naming the node.",
        "`kiln-import MODEL --report` shows what each op of a given model became.",
        "",
        f"## PyTorch ({len(torch_patterns)} ops)",
        "",
        *_source_table(torch_patterns, "torch.", STRUCTURAL),
        "",
        f"## ONNX ({len(onnx_patterns)} ops)",
        "",
        *_source_table(onnx_patterns, "onnx.", STRUCTURAL),
        "",
        "## kiln ops",
        "",
        "Each op's implementations side by side, one table per op family (`kiln/implementations.py`,",
        "read from where each is registered): *numpy*, the reference every other one is checked against",
        "(`kiln-fold-constants` evaluates with it); *CPU generated*, a `lower_<op>` in the kiln-to-linalg",
        "table (`conversions/kiln_to_linalg/`); *CPU native*, the library kernels `kiln-select-kernels`",
        "may choose (`backends/cpu/library_kernels.py`; *epilogue*: a product's or convolution's call",
        "applies the op after it); *Triton*, the kernel kind the op starts; *PyTorch*, the torch kernel a",
        "Triton-backend schedule runs it with; *kiln-decompose*, a rewrite into primitives (before",
        "Triton, and on the CPU unless its option is off). `test/python/dialect/test_op_implementations.py`",
        "runs every implementation listed here against numpy.",
        "",
        *_kiln_tables(),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) the table; 1 when ``--check`` finds it stale."""
    p = argparse.ArgumentParser(prog="python -m kiln.tools.op_table", description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", type=Path, default=DEFAULT_PATH, help=f"the file (default: {DEFAULT_PATH})")
    p.add_argument("--check", action="store_true", help="exit 1 if the file is not what the tables give")
    args = p.parse_args(argv)
    text = generate()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run `python -m kiln.tools.op_table` and commit it", file=sys.stderr)
            return 1
        print(f"{args.output} is current")
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
