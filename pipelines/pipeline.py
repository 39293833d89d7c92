"""Pipelines as data: an ordered list of named stages, in MLIR's pipeline syntax.

``Pipeline.parse("builtin.module(kiln-infer-shapes,canonicalize,func.func(cse))")``
and ``Pipeline().add("kiln-infer-shapes").add("canonicalize").add("func.func(cse)")``
build the same thing; ``str(pipeline)`` gives back the text ``kiln-opt
--pass-pipeline`` accepts.  A stage is a kiln pass (run in Python on the
module) or upstream MLIR pipeline text (run by MLIR's PassManager).

Running verifies the module after every stage, so a broken pass is caught
where it breaks; a failure raises :class:`~kiln.errors.PipelineError` with
the diagnostics and a ``kiln-opt`` command that reproduces it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from .._mlir import ir, passmanager
from ..context import DiagnosticCollector
from ..errors import (
    Diagnostic,
    KilnError,
    PipelineError,
    UnsupportedError,
    UnsupportedPipelineError,
    diagnostic_from_mlir,
)
from ..module import verify_module
from .registry import Pass, get_pass

__all__ = ["Pipeline", "Stage", "parse_pipeline_text"]


@dataclass
class Stage:
    """One step of a pipeline: a kiln pass instance, or upstream pipeline text."""

    name: str
    kiln_pass: Pass | None = None
    mlir_text: str | None = None

    def textual(self) -> str:
        """The stage as pass-pipeline text (``kiln-fuse{...}`` or the MLIR pipeline it runs)."""
        return self.kiln_pass.textual() if self.kiln_pass else self.mlir_text


def _split_top(text: str, where: str) -> list[str]:
    """Split on commas outside ``()`` and ``{}``."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced ')' in pass pipeline '{where}'")
        if ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise PipelineError(f"unbalanced '(' in pass pipeline '{where}'")
    items.append("".join(cur).strip())
    return [i for i in items if i]


def parse_pipeline_text(text: str) -> list[tuple[str, str | None, str]]:
    """Parse ``builtin.module(a, b{x=1}, func.func(cse))`` into top-level elements.

    Returns ``(name, options_text or None, element_text)`` per element; a
    nested pipeline such as ``func.func(cse)`` has name ``func.func`` and no
    options.  The outer ``builtin.module(...)`` is optional.
    """
    body = text.strip()
    if body.startswith("builtin.module(") and body.endswith(")"):
        body = body[len("builtin.module(") : -1]
    elif body.startswith("builtin.module"):
        raise PipelineError(f"malformed pass pipeline '{text}': expected 'builtin.module(...)'")
    out = []
    for item in _split_top(body, text):
        name = item
        options = None
        if "{" in item:
            name, _, rest = item.partition("{")
            if not rest.endswith("}"):
                raise PipelineError(f"malformed options in pass pipeline element '{item}'")
            options = rest[:-1]
        elif "(" in item:
            name = item.partition("(")[0]
        out.append((name.strip(), options, item))
    return out


def _check_mlir_text(text: str) -> None:
    try:
        passmanager.PassManager.parse(f"builtin.module({text})")
    except Exception as e:  # the bindings raise ValueError with MLIR's message
        msg = str(e).strip().splitlines()
        detail = next((line for line in msg if "pass" in line.lower() or "error" in line.lower()), msg[-1] if msg else "")
        raise PipelineError(f"'{text}' is not a kiln pass or a valid MLIR pass pipeline: {detail.strip()}") from None


@dataclass
class Pipeline:
    """An ordered list of named stages.

    ``stop_after`` names a stage (a pass name) after which :meth:`run` stops.
    With ``save_repro`` the input IR is saved so that a failure's PipelineError
    carries a ``kiln-opt`` command reproducing it (kiln-opt itself does not
    need one: its input is already a file).
    ``after_stage`` (if set) is called as ``after_stage(stage, module)`` after
    each stage; kiln-opt uses it for ``--mlir-print-ir-after-all``.
    """

    stages: list[Stage] = field(default_factory=list)
    stop_after: str | None = None
    after_stage: Callable | None = None
    save_repro: bool = False

    @classmethod
    def parse(cls, text: str, **kw) -> Pipeline:
        """Build from pipeline text; kiln passes and upstream passes may mix.

        Upstream text is checked against MLIR's registry, which needs a
        current Context.
        """
        p = cls(**kw)
        for name, options, item in parse_pipeline_text(text):
            p._add_element(name, options, item)
        return p

    @classmethod
    def named(cls, name: str, *, without=(), **kw) -> Pipeline:
        """One of kiln's named pipelines (``kiln-default-cpu``, ...; see
        :mod:`kiln.pipelines.named`), minus the passes in ``without``."""
        from .named import NAMED_PIPELINES

        found = NAMED_PIPELINES.get(name)
        if found is None:
            raise PipelineError(f"no named pipeline '{name}' (known: {', '.join(NAMED_PIPELINES)})")
        unknown = set(without) - set(found.stage_names)
        if unknown:
            raise PipelineError(f"'{name}' has no stage {', '.join(sorted(unknown))} (stages: {', '.join(found.stage_names)})")
        return cls.parse(found.text(without), **kw)

    def add(self, name: str, **options) -> Pipeline:
        """Append a kiln pass (with options) or upstream pipeline text; returns self."""
        kiln_cls = get_pass(name)
        if kiln_cls is not None:
            self.stages.append(Stage(name, kiln_pass=kiln_cls(**options)))
            return self
        if options:
            text = name + "{" + " ".join(f"{k.replace('_', '-')}={v}" for k, v in options.items()) + "}"
        else:
            text = name
        for el_name, el_options, item in parse_pipeline_text(text):
            self._add_element(el_name, el_options, item)
        return self

    def _add_element(self, name: str, options: str | None, item: str) -> None:
        from .named import named_pipeline

        named = named_pipeline(name) if item == name else None
        if named is not None:  # a named pipeline stands for its stages
            for el_name, el_options, el_item in parse_pipeline_text(named.text()):
                self._add_element(el_name, el_options, el_item)
            return
        kiln_cls = get_pass(name)
        if kiln_cls is not None:
            self.stages.append(Stage(name, kiln_pass=kiln_cls.from_options_text(options or "")))
            return
        if "(" in item:
            nested = item[item.index("(") + 1 : -1]
            for inner in _split_top(nested, item):
                inner_name = inner.partition("{")[0].partition("(")[0].strip()
                if get_pass(inner_name) is not None:
                    raise PipelineError(
                        f"kiln pass '{inner_name}' runs on the module; use it at builtin.module level, not inside '{name}(...)'"
                    )
        if ir.Context.current is not None:
            _check_mlir_text(item)
        self.stages.append(Stage(name, mlir_text=item))

    def __str__(self) -> str:
        return "builtin.module(" + ",".join(s.textual() for s in self.stages) + ")"

    def __len__(self) -> int:
        return len(self.stages)

    @property
    def names(self) -> list[str]:
        """The stage names, in order."""
        return [s.name for s in self.stages]

    def statistics(self) -> dict[str, dict[str, int]]:
        """Counters of each kiln pass that ran: ``{pass name: {counter: n}}``."""
        return {s.name: dict(s.kiln_pass.statistics) for s in self.stages if s.kiln_pass and s.kiln_pass.statistics}

    def run(self, module, *, verify_each: bool | None = True) -> list[Diagnostic]:
        """Run the stages on ``module`` (an ``ir.Module`` or module op) in place.

        ``verify_each``: True verifies after every stage (mlir-opt's default);
        None verifies once after the last one, or after every stage when
        ``KILN_VERIFY_EACH=1`` (``kiln.compile``'s choice: a verification walks
        the whole model, and per stage it was 4.3 of resnet50's 10.5 s
        compile); False never.  Returns the non-error diagnostics (warnings,
        remarks) emitted; raises PipelineError with the diagnostics when a
        stage fails or leaves invalid IR.
        """
        at_end = False
        if verify_each is None:
            from ..options import current

            verify_each = current().verify_each
            at_end = not verify_each
        op = module.operation if hasattr(module, "operation") else module
        if self.stop_after is not None and self.stop_after not in self.names:
            raise PipelineError(f"--stop-after: no stage '{self.stop_after}' in {self} (stages: {', '.join(self.names)})")
        emitted: list[Diagnostic] = []
        # The input, printed once, for the repro command of a failure.
        before = str(op) if self.save_repro else None
        for stage in self.stages:
            with DiagnosticCollector(op.context) as collector:
                failure = self._run_stage(stage, op)
                if failure is None and verify_each:
                    try:
                        verify_module(op)
                    except KilnError as e:
                        failure = PipelineError(f"stage '{stage.name}' produced invalid IR", e.diagnostics)
            if stage.kiln_pass is not None:
                collector.diagnostics += stage.kiln_pass.diagnostics
                stage.kiln_pass.diagnostics = []
            errors = [d for d in collector.diagnostics if d.severity == "error"]
            emitted += [d for d in collector.diagnostics if d.severity != "error"]
            if failure is not None or errors:
                diags = failure.diagnostics if failure is not None and failure.diagnostics else []
                diags = diags + [d for d in errors if d not in diags]
                msg = failure.message if failure is not None else f"stage '{stage.name}' failed"
                kind = type(failure) if failure is not None else PipelineError
                raise kind(msg, diags, repro=self._repro(before))
            if self.after_stage is not None:
                self.after_stage(stage, op)
            if self.stop_after == stage.name:
                break
        if at_end:
            try:
                verify_module(op)
            except KilnError as e:
                raise PipelineError(f"pipeline '{self}' produced invalid IR (KILN_VERIFY_EACH=1 names the pass)",
                                    e.diagnostics, repro=self._repro(before)) from None
        return emitted

    @staticmethod
    def _run_stage(stage: Stage, op) -> PipelineError | None:
        if stage.kiln_pass is not None:
            try:
                stage.kiln_pass.run(op)
            except KilnError as e:
                kind = UnsupportedPipelineError if isinstance(e, UnsupportedError) else PipelineError
                return kind(f"pass '{stage.name}' failed: {e.message}", e.diagnostics)
            return None
        try:
            pm = passmanager.PassManager.parse(f"builtin.module({stage.mlir_text})")
        except Exception as e:
            return PipelineError(f"invalid pass pipeline '{stage.mlir_text}': {e}")
        try:
            pm.run(op)
        except ir.MLIRError as e:
            return PipelineError(
                f"pass pipeline '{stage.mlir_text}' failed", [diagnostic_from_mlir(d) for d in e.error_diagnostics]
            )
        return None

    def _repro(self, before: str | None) -> str | None:
        if before is None:
            return None
        fd, path = tempfile.mkstemp(prefix="kiln-repro-", suffix=".mlir")
        with os.fdopen(fd, "w") as f:
            f.write(before)
        return f"kiln-opt --pass-pipeline='{self}' {path}"
