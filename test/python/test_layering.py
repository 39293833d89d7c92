"""kiln's import layers, checked from the source (issue 40, "layers that can be seen").

Every kiln module's imports (module level and function-local, read with
``ast``; imports under ``if TYPE_CHECKING:`` never run and are skipped) must
go to its own layer or a lower one:

====  ===========  ==========================================================
rank  layer        modules
====  ===========  ==========================================================
0     base         ``kiln`` (the package: its public names load lazily
                   through importlib), ``errors``, ``options``, ``progress``,
                   ``dialects`` (the package) and ``dialects.dims`` (sympy,
                   no MLIR)
1     runtime      ``runtime/``, ``serve``, and the modules of ``backends/``
                   that a loaded artifact executes (:data:`RUNTIME_SIDE`)
2     mlir         ``_mlir`` (the one module importing torch-mlir),
                   ``context``, ``module``, ``locations``, ``dialects.kiln``
3     compiler     ``frontends/``, ``conversions/``, ``transforms/``,
                   ``pipelines/``, the rest of ``backends/``,
                   ``compile_prepare``
4     top          ``compiler``, ``validate``, ``implementations``, ``sources``, ``tools/``,
                   ``bench/``
====  ===========  ==========================================================

so a compiled artifact needs only ranks 0 and 1, numpy and its object code
(DESIGN.md, "Artifacts and serving"); the subprocess test in
``runtime/test_artifact_selfcontained.py`` checks the same at run time.
``torch_mlir`` counts as rank 2, the layer of ``_mlir`` (the bindings'
one door) and of the frontends' use of its importers above it.  Imports
that run back up a layer today are in
:data:`ALLOWED_UP`, each with why: the list may only shrink (an entry that
no longer matches fails the test, so a fixed one must be deleted).

Cycles: no import circle between top-level units (a subpackage, or a
top-level module; the runtime-side backend modules count as ``kiln.runtime``)
beyond :data:`KNOWN_UNIT_CIRCLES` (the list may only shrink), and none
inside ``backends/cpu``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root is the kiln package

#: Folders of the repository that are not part of the package.
NOT_PACKAGE = {"test", "build", "docs", "examples", "scripts", "kiln.egg-info", "__pycache__"}

#: backends/ modules that a loaded artifact runs (the kernel base class,
#: argument descriptors, the digest-checked cache, PyTorch fallbacks): rank 1.
#: (The CPU kernel and library loader moved to runtime/cpu_code.py; these
#: could follow.)
RUNTIME_SIDE = {
    "kiln.backends.kernel",
    "kiln.backends.cache",
    "kiln.backends.cache_root",
    "kiln.backends.fallback",
    "kiln.backends.cpu.dispatch",
}

#: (prefix, layer): the most specific (longest) matching prefix wins.
LAYERS = [
    ("kiln", "base"),  # only the root package's __init__ is matched by this exact entry (see layer_of)
    ("kiln.errors", "base"),
    ("kiln.options", "base"),
    ("kiln.progress", "base"),
    ("kiln.dialects", "base"),  # the package __init__ (no imports) and dims; dialects.kiln is below
    ("kiln.dialects.dims", "base"),
    ("kiln.runtime", "runtime"),
    ("kiln.serve", "runtime"),
    ("kiln._mlir", "mlir"),
    ("torch_mlir", "mlir"),
    ("kiln.context", "mlir"),
    ("kiln.module", "mlir"),
    ("kiln.locations", "mlir"),
    ("kiln.dialects.kiln", "mlir"),
    ("kiln.frontends", "compiler"),
    ("kiln.conversions", "compiler"),
    ("kiln.transforms", "compiler"),
    ("kiln.pipelines", "compiler"),
    ("kiln.backends", "compiler"),
    ("kiln.compile_prepare", "compiler"),
    ("kiln.compiler", "top"),
    ("kiln.validate", "top"),
    ("kiln.implementations", "top"),  # reads every layer's registry of op implementations
    ("kiln.sources", "top"),
    ("kiln.tools", "top"),
    ("kiln.bench", "top"),
    ("kiln.lm", "top"),  # generation: compiles through kiln.compile
]
RANK = {"base": 0, "runtime": 1, "mlir": 2, "compiler": 3, "top": 4}

#: Imports that run up a layer today, as (importer, imported, why).  Every
#: one is function-local and runs only on a path a loaded artifact does not
#: take (or fails there with a KilnError naming what is missing).  Shrink it.
ALLOWED_UP = {
    ("kiln.runtime.artifact", "kiln.compiler",
     "a legacy (kiln IR) artifact and a new specialization compile where the compiler is installed; "
     "without it, a KilnError says so (test_artifact_selfcontained)"),
    ("kiln.runtime.artifact_save", "kiln.backends.cpu.export",
     "kiln.save cuts the weights out of the object code and links the library; save runs where the model was "
     "compiled (or re-saves a loaded one from its files)"),
    ("kiln.backends.triton.model", "kiln.compiler",
     "the Triton backend reuses compiler.py's source loading, signature and fallback warnings; they belong below it"),
}


def layer_of(name: str) -> str | None:
    """The layer of module ``name`` (None: not kiln's, not torch-mlir's)."""
    if name in RUNTIME_SIDE:
        return "runtime"
    if name == "kiln":
        return "base"
    best = None
    for prefix, layer in LAYERS:
        if prefix != "kiln" and (name == prefix or name.startswith(prefix + ".")):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer)
    return best[1] if best else None


def kiln_modules() -> dict[str, tuple[Path, bool]]:
    """``{module name: (path, is package)}`` for every module of the package."""
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in NOT_PACKAGE or rel.parts[0].startswith(".") or "__pycache__" in rel.parts:
            continue
        if any(not (ROOT.joinpath(*rel.parts[:i]) / "__init__.py").exists() for i in range(1, len(rel.parts))):
            continue  # a folder that is not a package (runtime/native's sources, build trees)
        parts = list(rel.parts[:-1]) + ([] if path.name == "__init__.py" else [path.stem])
        out[".".join(["kiln", *parts])] = (path, path.name == "__init__.py")
    return out


MODULES = kiln_modules()


def _type_checking_only(node) -> bool:
    test = node.test
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


def imports_of(name: str) -> list[tuple[str, int]]:
    """``(imported module, line)`` for each kiln or torch-mlir import of module
    ``name``; ``from pkg import sub`` counts as ``pkg.sub`` when that is a module."""
    path, is_pkg = MODULES[name]
    package = name if is_pkg else name.rpartition(".")[0]
    out = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                for sub in child.orelse:
                    visit_stmt(sub)
                continue
            visit_stmt(child)

    def visit_stmt(child):
        if isinstance(child, ast.Import):
            out.extend((a.name, child.lineno) for a in child.names)
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                target = ".".join(base + ([child.module] if child.module else []))
            else:
                target = child.module
            for a in child.names:
                full = f"{target}.{a.name}"
                out.append((full if full in MODULES else target, child.lineno))
        visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return [(t, line) for t, line in out if layer_of(t) is not None]


EDGES = {name: imports_of(name) for name in MODULES}


def test_every_module_has_a_layer():
    assert len(MODULES) > 100 and "kiln.runtime.executor" in MODULES and "kiln.compile_prepare" in MODULES
    assert not [m for m in MODULES if layer_of(m) is None]
    assert set(RUNTIME_SIDE) <= set(MODULES)


def test_no_import_runs_up_a_layer():
    allowed = {(a, b) for a, b, _ in ALLOWED_UP}
    found, used = [], set()  # found: sorted, one line per import
    for name, edges in sorted(EDGES.items()):
        for target, line in edges:
            if RANK[layer_of(target)] <= RANK[layer_of(name)]:
                continue
            key = next(((a, b) for a, b in allowed if name == a and (target == b or target.startswith(b + "."))), None)
            if key is not None:
                used.add(key)
                continue
            path = MODULES[name][0].relative_to(ROOT)
            found.append(f"{path}:{line}: {name} ({layer_of(name)}) imports {target} ({layer_of(target)})")
    assert not found, "imports up a layer:\n" + "\n".join(dict.fromkeys(found))
    assert not allowed - used, f"allow-listed imports that no longer exist (delete them): {sorted(allowed - used)}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def unit_of(name: str) -> str:
    """The top-level unit of a module: its subpackage or top-level module.

    The :data:`RUNTIME_SIDE` modules of ``backends/`` count as ``kiln.runtime``:
    they are the runtime's kernel objects and cache, which import
    ``runtime/`` and which ``runtime/`` imports (moving them under
    ``runtime/`` is the follow-up that makes the folders say it)."""
    if name in RUNTIME_SIDE:
        return "kiln.runtime"
    parts = name.split(".")
    if parts[:2] == ["kiln", "dialects"] and len(parts) > 2:
        return ".".join(parts[:3])  # dims (base) and kiln (the dialect) are different layers
    return ".".join(parts[:2])


def _allowed_up(name: str, target: str) -> bool:
    return any(name == a and (target == b or target.startswith(b + ".")) for a, b, _ in ALLOWED_UP)


def _why(units: list[str]) -> list[str]:
    members = set(units)
    return sorted({f"{MODULES[a][0].relative_to(ROOT)}:{line}: {a} -> {b}"
                   for a, edges in EDGES.items() for b, line in edges
                   if unit_of(a) in members and unit_of(b) in members and unit_of(a) != unit_of(b)
                   and not _allowed_up(a, b)})


#: Circles between top-level units today, each with why; it may only shrink.
KNOWN_UNIT_CIRCLES: dict[frozenset, str] = {
    # (bench/, tools/, validate.py was one: bench/ and validate.py used the CLI's
    # source loader, now kiln/sources.py below them all.)
}


def test_no_import_circle_between_top_level_units():
    # The allow-listed imports up a layer close circles by definition; they are counted above.
    graph = defaultdict(set)
    for name, edges in EDGES.items():
        for target, _ in edges:
            if target.startswith("kiln") and unit_of(name) != unit_of(target) and not _allowed_up(name, target):
                graph[unit_of(name)].add(unit_of(target))
    circles = [c for c in _cycles(graph) if frozenset(c) not in KNOWN_UNIT_CIRCLES]
    assert not circles, "\n\n".join(f"{c}:\n" + "\n".join(_why(c)) for c in circles)
    gone = set(KNOWN_UNIT_CIRCLES) - {frozenset(c) for c in _cycles(graph)}
    assert not gone, f"circles no longer there (delete them from KNOWN_UNIT_CIRCLES): {gone}"


def test_backends_cpu_has_no_import_circle():
    """No import circle inside backends/cpu (issue 40 found an 11-file one around ``library.py``, whose
    matchers imported the kernel families that imported it back; the stage's driver is
    ``contractions.py`` now, and ``library.py`` imports none of them)."""
    graph = defaultdict(set)
    for name, edges in EDGES.items():
        if name.startswith("kiln.backends.cpu."):
            graph[name] |= {t for t, _ in edges if t.startswith("kiln.backends.cpu.") and t != name}
    assert not _cycles(graph), _cycles(graph)


def test_the_checker_sees_function_local_imports_and_skips_type_checking_ones():
    # Not vacuous: runtime/artifact.py imports the compiler inside load() (allow-listed above),
    # backends/kernel.py imports TensorInfo only for annotations (never at run time).
    assert any(t == "kiln.compiler" for t, _ in EDGES["kiln.runtime.artifact"])
    assert not any(t.startswith("kiln.dialects.kiln") for t, _ in EDGES["kiln.backends.kernel"])
    assert "TYPE_CHECKING" in MODULES["kiln.backends.kernel"][0].read_text()
    # prepare() runs passes: the module that holds it is on the compiler's side, and the executor is not.
    assert {"kiln.pipelines", "kiln._mlir"} <= {t for t, _ in EDGES["kiln.compile_prepare"]}
    assert not any(RANK[layer_of(t)] > RANK["runtime"] for t, _ in EDGES["kiln.runtime.executor"])
