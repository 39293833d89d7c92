"""The ``expected-error`` convention of ``mlir-opt --verify-diagnostics``.

A comment ``// expected-error {{text}}`` expects an error on its own line
whose message contains ``text``; ``@below`` / ``@above`` / ``@+N`` / ``@-N``
move the expected line.  ``expected-warning``, ``expected-note`` and
``expected-remark`` work the same way.  Every expectation must be met and
every diagnostic must be expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import Diagnostic

_EXPECT = re.compile(
    r"expected-(error|warning|note|remark)\s*(?:@(above|below|[+-]\d+))?\s*\{\{(.*?)\}\}"
)


@dataclass
class Expectation:
    """One ``expected-*`` comment: the severity, line and message text it wants."""

    severity: str
    line: int
    text: str
    source_line: int
    matched: bool = False


def parse_expectations(text: str, first_line: int = 1) -> list[Expectation]:
    """The expectations in ``text`` (whose first line is ``first_line``)."""
    lines = text.split("\n")
    out = []
    for idx, line in enumerate(lines):
        for m in _EXPECT.finditer(line):
            severity, where, msg = m.group(1), m.group(2), m.group(3)
            lineno = first_line + idx
            if where is None:
                target = lineno
            elif where == "above":
                target = lineno - 1
            elif where == "below":
                # The next line that is not itself only an expectation.
                k = idx + 1
                while k < len(lines) and _EXPECT.search(lines[k]) and lines[k].strip().startswith("//"):
                    k += 1
                target = first_line + k
            else:
                target = lineno + int(where)
            out.append(Expectation(severity, target, msg, lineno))
    return out


def _flatten(diags: list[Diagnostic]) -> list[Diagnostic]:
    out = []
    for d in diags:
        out.append(d)
        out.extend(_flatten(d.notes))
    return out


def check_diagnostics(expectations: list[Expectation], diags: list[Diagnostic], source: str) -> list[str]:
    """Match diagnostics against expectations; returns the failures as
    ``file:line: error: ...`` lines (empty when everything matched)."""
    problems = []
    for d in _flatten(diags):
        hit = None
        for e in expectations:
            if not e.matched and e.severity == d.severity and e.line == d.line and e.text in d.message:
                hit = e
                break
        if hit is not None:
            hit.matched = True
        else:
            where = f"{d.file or source}:{d.line}:{d.col}" if d.line else source
            problems.append(f"{where}: error: unexpected {d.severity}: {d.message}")
    for e in expectations:
        if not e.matched:
            problems.append(f'{source}:{e.source_line}: error: expected {e.severity} "{e.text}" was not produced')
    return problems
