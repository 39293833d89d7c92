"""The kiln exception hierarchy and its diagnostics.

Every error that kiln reports to a user is a :class:`KilnError`.  Errors that
come from MLIR diagnostics keep them as :class:`Diagnostic` records (severity,
location, message, notes), so tools can print them the way ``mlir-opt`` does
(``file:line:col: error: message``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "ConversionError",
    "Diagnostic",
    "DimError",
    "KilnError",
    "ParseError",
    "PipelineError",
    "ShapeError",
    "UnsupportedError",
    "UnsupportedPipelineError",
    "VerifyError",
]


@dataclass
class Diagnostic:
    """One diagnostic: severity, a printed location, its message and notes.

    ``file``, ``line`` and ``col`` are filled in when the location is a file
    location (possibly nested in a name, call-site or fused location).
    """

    severity: str
    location: str
    message: str
    notes: list[Diagnostic] = field(default_factory=list)
    file: str | None = None
    line: int | None = None
    col: int | None = None

    def format(self, source_lines: dict[str, list[str]] | None = None) -> str:
        """The diagnostic as ``mlir-opt`` prints it, with a caret line if the
        source text is known."""
        if self.file is not None:
            head = f"{self.file}:{self.line}:{self.col}: {self.severity}: {self.message}"
        elif self.location and self.location != "loc(unknown)":
            head = f"{self.location}: {self.severity}: {self.message}"
        else:
            head = f"{self.severity}: {self.message}"
        out = [head]
        lines = (source_lines or {}).get(self.file) if self.file else None
        if lines and self.line and 0 < self.line <= len(lines):
            text = lines[self.line - 1].rstrip("\n")
            out.append(text)
            out.append(" " * max(0, (self.col or 1) - 1) + "^")
        for note in self.notes:
            out.append(note.format(source_lines))
        return "\n".join(out)

    def __str__(self) -> str:
        return self.format()


_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


def location_fields(location: str) -> dict:
    """``file``, ``line`` and ``col`` of the first file location in a printed location."""
    m = _FILE_LOC.search(location)
    if not m:
        return {}
    return {"file": m.group(1), "line": int(m.group(2)), "col": int(m.group(3))}


def diagnostic_from_mlir(diag) -> Diagnostic:
    """Convert an MLIR ``DiagnosticInfo``/``Diagnostic`` into a Diagnostic."""
    severity = str(diag.severity).rsplit(".", 1)[-1].lower()
    location = str(diag.location)
    d = Diagnostic(severity, location, str(diag.message), **location_fields(location))
    d.notes = [diagnostic_from_mlir(n) for n in diag.notes]
    for n in d.notes:
        n.severity = "note"
    return d


class KilnError(Exception):
    """Base class of every error kiln reports to its users.

    ``diagnostics`` holds the MLIR diagnostics behind the error, when there
    are any; ``str(error)`` includes them.
    """

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None):
        super().__init__(message)
        self.message = message
        self.diagnostics = list(diagnostics or [])

    def __str__(self) -> str:
        if not self.diagnostics:
            return self.message
        body = "\n".join(d.format() for d in self.diagnostics)
        return f"{self.message}\n{body}" if self.message else body


class ParseError(KilnError):
    """Text that is not valid MLIR, or a file that cannot be read."""


class VerifyError(KilnError):
    """IR that parses but breaks a verifier rule (types, dims, symbols)."""


class DimError(KilnError):
    """A dim value or expression that is malformed or cannot be evaluated."""


class ShapeError(KilnError):
    """Concrete shapes that break a model's shape contract at call time."""


class UnsupportedError(KilnError):
    """An op, dtype or feature kiln does not handle (and was told not to fall back)."""


class ConversionError(KilnError):
    """A Dialect Conversion that could not legalize the IR."""


class PipelineError(KilnError):
    """A pass pipeline that is malformed or failed while running.

    ``repro`` is a ready-to-paste ``kiln-opt`` command reproducing the failure.
    """

    def __init__(self, message: str, diagnostics=None, repro: str | None = None):
        super().__init__(message, diagnostics)
        self.repro = repro

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\nrepro: {self.repro}" if self.repro else text


class UnsupportedPipelineError(PipelineError, UnsupportedError):
    """A pass that met a feature kiln lacks: a :class:`PipelineError` (which
    pass, the repro command) that is also an :class:`UnsupportedError` (what
    is missing), so callers catching either see it."""
