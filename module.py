"""Parsing, canonicalizing and verifying kiln modules.

:func:`parse_module` is how every tool reads IR: it parses, puts every
``!kiln.tensor`` type into canonical form (as a C++ type's ``get`` would), and
verifies the module: the ops' own verifiers, then the module-level rules that
no single op can check (types well-formed, every symbol declared once,
function arguments with named dims).  Failures raise ``ParseError`` /
``VerifyError`` carrying the diagnostics, with file locations.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import signal
import time

from ._mlir import ir
from .context import DiagnosticCollector
from .dialects.dims import dim
from .dialects.kiln import TensorType, tensor_info, tensor_type
from .errors import Diagnostic, KilnError, ParseError, VerifyError, diagnostic_from_mlir
from .runtime.symbols import SymbolInfo  # defined in the runtime: loading an artifact needs no MLIR

__all__ = [
    "SymbolInfo",
    "top_level_ops",
    "canonicalize_types",
    "parse_module",
    "symbols_of",
    "verify_module",
]


def _mlir_errors(e: ir.MLIRError, collected: list[Diagnostic]) -> list[Diagnostic]:
    diags = [diagnostic_from_mlir(d) for d in e.error_diagnostics]
    seen = {(d.location, d.message) for d in diags}
    return diags + [d for d in collected if (d.location, d.message) not in seen]


def parse_module(text: str, source_name: str = "-", *, verify: bool = True) -> ir.Module:
    """Parse ``text`` into a module of the current context.

    A bare list of ops is wrapped in a module, as mlir-opt does.  Types are
    canonicalized; with ``verify`` the module is verified.  Raises ParseError
    or VerifyError with the diagnostics.
    """
    ctx = ir.Context.current
    if not text.endswith("\n"):
        # A text ending inside a resource blob's string made the parser read
        # past its end (SIGSEGV); with a final newline it reports the string.
        text += "\n"
    # Parse once here (a second parse would rename dense resources), inside a
    # module unless the text is one: the parser wants one top-level op.
    wrapped, shifted_line = _wrap_in_module(text)
    _probe_parse(wrapped, source_name, ctx, shifted_line)
    op = _parse_op(wrapped, source_name, ctx, shifted_line)
    body = top_level_ops(op) if wrapped is not text else []
    if len(body) == 1 and body[0].operation.name == "builtin.module":
        # Detach (not erase): each parsed op stays owned by one Python object;
        # erasing ops the bindings still track double-frees.
        op = body[0].operation.detach_from_parent()
    module = _to_module(op)
    canonicalize_types(module.operation)
    if verify:
        verify_module(module.operation)
    return module


def top_level_ops(module_op) -> list:
    """The ops directly inside a module (an empty module may have no block)."""
    region = module_op.regions[0]
    if len(region.blocks) == 0:
        return []
    return list(region.blocks[0].operations)


def ops_where(root, keep) -> list:
    """The ops nested in ``root`` (an operation, op view or module; itself
    included) for which ``keep(op)`` holds, in the bindings' walk order.
    Collected first, so callers may change or erase them afterwards."""
    found = []

    def visit(op):
        if keep(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    getattr(root, "operation", root).walk(visit)
    return found


_VERIFIER_MESSAGE = re.compile(r"^'[\w.$]+' op |^function argument #")


def _to_module(module_op) -> ir.Module:
    """An ``ir.Module`` holding the ops (and attributes) of a parsed module op."""
    module = ir.Module.create(module_op.location)
    attrs = module_op.operation.attributes
    for name in [a.name if hasattr(a, "name") else a for a in attrs]:
        module.operation.attributes[name] = attrs[name]
    ip = ir.InsertionPoint(module.body)
    for op in top_level_ops(module_op):
        ip.insert(op.detach_from_parent())
    return module  # the emptied module_op is owned by Python and freed with it


_WRAP_PREFIX = "module {"
_ALIAS = re.compile(r"^\s*[#!][\w.$-]+\s*=")


def _is_preamble(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("//") or bool(_ALIAS.match(line))


def _wrap_in_module(text: str) -> tuple[str, int | None]:
    """``text`` with its top-level ops inside ``module { ... }``, and the
    (1-based) line whose columns the prefix shifted, or None.

    Alias definitions (``#map = ...``, ``#loc = ...``) and the ``{-# ... #-}``
    resource section stay outside the module, where they must be.  The prefix
    shares the first op's line, so line numbers are kept.  A text whose first
    op is already a ``module`` is left as it is.
    """
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if not _is_preamble(line)), None)
    if first is None:
        return text + "\n" + _WRAP_PREFIX + "}", None  # nothing but comments: an empty module
    if lines[first].lstrip().startswith(("module", '"builtin.module"')) and not lines[first].lstrip().startswith("module_"):
        return text, None
    end = len(lines)
    resource = text.rfind("\n{-#")
    if resource >= 0:
        end = text.count("\n", 0, resource) + 1
    while end > first + 1 and _is_preamble(lines[end - 1]):
        end -= 1
    lines[first] = _WRAP_PREFIX + lines[first]
    lines[end - 1] = lines[end - 1] + "\n}"
    return "\n".join(lines), first + 1


def _unshift(diags: list[Diagnostic], line: int | None) -> list[Diagnostic]:
    """Undo the column shift the module prefix gave diagnostics on ``line``."""
    for d in diags:
        if line is not None and d.line == line and d.col is not None and d.col > len(_WRAP_PREFIX):
            d.col -= len(_WRAP_PREFIX)
        _unshift(d.notes, line)
    return diags


#: How long a probe parse may take: generous, as a model's weights can make
#: the text hundreds of MB (seconds per 100 MB here).
_PROBE_SECONDS_MIN, _PROBE_SECONDS_PER_MB = 120.0, 2.0


def _probe_parse(text: str, source_name: str, ctx: ir.Context, shifted_line: int | None) -> None:
    """Parse ``text`` first in a forked child, so the parser's own crashes
    cannot reach this process; raise the child's ParseError / VerifyError.

    MLIR's parser has bugs that only malformed text reaches: some error paths
    corrupt the heap (a redefined block label: the *next* parse in the
    process aborts in malloc), others segfault (a float in a linalg op's
    ``dimensions``).  A text is parsed here only once the child parsed it
    cleanly: the same text takes the same path, and that path is not an error
    path.  A failing text is never parsed here: its diagnostics come from the
    child, and a crash or hang of the child is a ParseError naming it.
    Without ``os.fork`` (not POSIX) the text is parsed here directly.
    """
    if not hasattr(os, "fork"):
        return
    torch = ctx.is_registered_operation("torch.aten.add.Tensor")
    unregistered = ctx.allow_unregistered_dialects
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: parse, report, and leave without running any cleanup
        try:
            os.close(read_end)
            payload = _child_parse(text, source_name, shifted_line, torch, unregistered)
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    limit = _PROBE_SECONDS_MIN + _PROBE_SECONDS_PER_MB * len(text) / 1e6
    chunks, deadline = [], time.monotonic() + limit
    with os.fdopen(read_end, "rb") as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise ParseError(f"could not parse {source_name}: the MLIR parser did not finish in {limit:.0f} s")
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if os.WIFSIGNALED(status) or not data:
        why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        raise ParseError(f"could not parse {source_name}: the MLIR parser crashed on it ({why}); this process "
                         "did not parse it")
    result = json.loads(data)
    if result["ok"]:
        return
    kind = VerifyError if result["kind"] == "VerifyError" else ParseError
    raise kind(result["message"], [_diagnostic_from_dict(d) for d in result["diagnostics"]])


def _child_parse(text: str, source_name: str, shifted_line: int | None, torch: bool, unregistered: bool) -> bytes:
    """In the probe's child: parse in a fresh context like the caller's;
    ``{"ok": true}`` or the error, as JSON."""
    from .dialects.kiln import Kiln

    ctx = ir.Context()  # not make_context: its lock may be held by a thread that fork left behind
    ctx.allow_unregistered_dialects = unregistered
    with ctx, ir.Location.unknown():
        Kiln.load()
        if torch:
            from torch_mlir.dialects import torch as torch_dialect

            torch_dialect.register_dialect(ctx)
        try:
            _parse_op(text, source_name, ctx, shifted_line)
        except KilnError as e:
            return json.dumps({"ok": False, "kind": type(e).__name__, "message": e.message,
                               "diagnostics": [dataclasses.asdict(d) for d in e.diagnostics]}).encode()
        except Exception as e:  # _parse_op turns every error into a KilnError; this is belt and braces
            return json.dumps({"ok": False, "kind": "ParseError", "message": f"could not parse {source_name}: {e}",
                               "diagnostics": []}).encode()
    return b'{"ok": true}'


def _diagnostic_from_dict(d: dict) -> Diagnostic:
    return Diagnostic(**{**d, "notes": [_diagnostic_from_dict(n) for n in d["notes"]]})


def _parse_op(text: str, source_name: str, ctx: ir.Context, shifted_line: int | None = None):
    with DiagnosticCollector(ctx) as collector:
        try:
            return ir.Operation.parse(text, source_name=source_name)
        except ir.MLIRError as e:
            diags = _unshift(_mlir_errors(e, collector.diagnostics), shifted_line)
            # The parser verifies what it parsed: op-prefixed messages
            # ("'kiln.add' op ...") come from verifiers, the rest from parsing.
            if diags and all(_VERIFIER_MESSAGE.match(d.message) for d in diags if d.severity == "error"):
                raise VerifyError(f"invalid IR in {source_name}", diags) from None
            raise ParseError(f"could not parse {source_name}", diags) from None
        except Exception as e:
            raise ParseError(f"could not parse {source_name}: {e}") from None


def _canonical(t):
    if not isinstance(t, TensorType):
        return t
    try:
        info = tensor_info(t)
    except VerifyError:
        return t  # malformed: leave it for the verifier to report
    return tensor_type(info.dims, info.dtype)


def canonicalize_types(root: ir.Operation) -> None:
    """Rewrite every ``!kiln.tensor`` under ``root`` into canonical form
    (``"L*B"`` becomes ``"B*L"``), including function signatures."""

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    new = _canonical(arg.type)
                    if new != arg.type:
                        arg.set_type(new)
        for r in op.results:
            new = _canonical(r.type)
            if new != r.type:
                r.set_type(new)
        if op.name.startswith("kiln."):
            _canonicalize_dim_attrs(op)
        if op.name == "func.func":
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            inputs = [_canonical(t) for t in ftype.inputs]
            results = [_canonical(t) for t in ftype.results]
            if inputs != list(ftype.inputs) or results != list(ftype.results):
                op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
        return ir.WalkResult.ADVANCE

    root.walk(visit)


def _canonicalize_dim_attrs(op) -> None:
    from .dialects.kiln import OPS, encode_attr
    from .dialects.kiln.base import decode_attr

    cls = OPS.get(op.name)
    if cls is None:
        return
    for name, spec in cls.ATTRS.items():
        if spec.kind != "dims" or name not in op.attributes:
            continue
        try:
            value = decode_attr(spec, op.attributes[name], name)
        except KilnError:
            continue  # malformed: the verifier reports it
        new = encode_attr(spec, value)
        if new != op.attributes[name]:
            op.attributes[name] = new


def symbols_of(root: ir.Operation) -> dict[str, SymbolInfo]:
    """The symbols declared at the top level of a module, by name."""
    out = {}
    for op in top_level_ops(root):
        if op.operation.name == "kiln.symbol":
            view = op.operation.opview
            out[view.attr("sym_name")] = SymbolInfo(
                view.attr("sym_name"), view.attr("min"), view.attr("max"), view.attr("opt"), view.attr("multiple_of")
            )
    return out


def _module_rules(root: ir.Operation) -> None:
    """The rules that need the whole module; errors go out as diagnostics."""
    # Redefinitions are caught by MLIR's symbol table verifier (sym_name).
    declared = set(symbols_of(root))
    # Each type decoded once per call: a model repeats a few types across
    # thousands of ops (the dict, and the types it holds, end with the call).
    infos: dict = {}

    def check_type(t, where: str, loc: ir.Location, allow_unknown: bool) -> None:
        if not isinstance(t, TensorType):
            return
        info = infos.get(t)
        if info is None:
            try:
                info = tensor_info(t)
            except VerifyError as e:
                info = e
            infos[t] = info
        if isinstance(info, VerifyError):
            loc.emit_error(f"{where}: {info.message}")
            return
        for axis, d in enumerate(info.dims):
            if d.is_unknown and not allow_unknown:
                loc.emit_error(f"{where} dim {axis} is '?': name it with a declared symbol")
            for s in sorted(d.symbols - set(declared)):
                loc.emit_error(f"{where} dim {axis} ('{d}') uses undeclared symbol '{s}'")

    def visit(op):
        name = op.name
        if name == "func.func":
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            for i, t in enumerate(ftype.inputs):
                check_type(t, f"function argument #{i}", op.location, False)
        elif name.startswith("kiln."):
            for i, r in enumerate(op.results):
                check_type(r.type, f"'{name}' op result #{i}", op.location, True)
        return ir.WalkResult.ADVANCE

    root.walk(visit)


def verify_module(root: ir.Operation) -> None:
    """Verify ``root`` (a module): op verifiers, then the module-level rules.

    Raises VerifyError with every diagnostic emitted.
    """
    ctx = root.context
    with DiagnosticCollector(ctx) as collector:
        try:
            ok = root.verify()
        except ir.MLIRError as e:
            raise VerifyError("verification failed", _mlir_errors(e, collector.diagnostics)) from None
        if ok is False or collector.errors:
            raise VerifyError("verification failed", collector.errors)
        _module_rules(root)
    if collector.errors:
        raise VerifyError("verification failed", collector.errors)


def symbol_range(module: ir.Operation, name: str) -> SymbolInfo:
    """The declaration of symbol ``name``; VerifyError if it is undeclared."""
    syms = symbols_of(module)
    if name not in syms:
        raise VerifyError(f"undeclared symbol '{name}'")
    return syms[name]


def dims_symbols(t) -> set[str]:
    """Symbols used by the dims of a kiln tensor type (empty for other types)."""
    if not isinstance(t, TensorType):
        return set()
    return set().union(*(dim(d).symbols for d in tensor_info(t).dims)) if tensor_info(t).dims else set()
