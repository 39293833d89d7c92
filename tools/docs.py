"""kiln's API reference: HTML built by pdoc from the docstrings of the public API.

    python -m kiln.tools.docs [-o build/docs] [--check]

The documented modules are ``kiln`` itself and the modules that define the
names in ``kiln.__all__`` (``kiln.compiler`` for ``compile``,
``kiln.runtime.model`` for ``CompiledModel``, ...), plus ``kiln.errors``:
the public API, not kiln's internals.  A module's submodules are documented
only when they are listed themselves.

The build fails (exit 1, each problem printed) when pdoc warns (a module
that does not import, an annotation it cannot resolve, ...) or when a public
function, class or method of a documented module has no docstring.  pdoc
imports the modules it documents; importing them builds nothing and runs no
model (``test/python/test_docs.py`` checks it).  ``--check`` runs the checks
without writing HTML.  ``scripts/docs.sh`` (run by ``scripts/test.sh``)
builds into ``build/docs/``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path

__all__ = ["build", "documented_modules", "main", "missing_docstrings"]

#: Modules documented besides those that define ``kiln.__all__``'s names.
EXTRA_MODULES = ("kiln", "kiln.errors", "kiln.validate")


def documented_modules() -> list[str]:
    """The modules of the API reference, sorted (a package before its submodules)."""
    import kiln

    modules = set(EXTRA_MODULES)
    for name in kiln.__all__:
        obj = getattr(kiln, name)
        module = getattr(obj, "__module__", None)
        if isinstance(module, str) and module.startswith("kiln."):
            modules.add(module)
    return sorted(modules)


def _specs(modules: list[str]) -> list[str]:
    """pdoc's module specs: each module, then a pattern that drops the
    submodules pdoc would walk into (a listed submodule comes later and is
    added back)."""
    specs = []
    for m in sorted(modules):
        specs += [m, "!" + re.escape(m) + r"\..*"]
    return specs


def _public(name: str, module_all) -> bool:
    if name.startswith("_"):
        return False
    return module_all is None or name in module_all


def missing_docstrings(modules: list[str]) -> list[str]:
    """``"kiln.x.f"`` for each public function, class or method (own, not
    inherited) of ``modules`` without a docstring; a module without one too."""
    missing = []
    for name in modules:
        mod = importlib.import_module(name)
        if not (mod.__doc__ or "").strip():
            missing.append(f"{name} (module)")
        module_all = getattr(mod, "__all__", None)
        names = module_all if module_all is not None else [n for n, v in vars(mod).items()
                                                          if getattr(v, "__module__", None) == name]
        for attr in names:
            obj = getattr(mod, attr, None)
            if not _public(attr, module_all) or not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue
            if not (inspect.getdoc(obj) or "").strip():
                missing.append(f"{name}.{attr}")
            if inspect.isclass(obj) and obj.__module__.startswith("kiln"):
                for member, value in vars(obj).items():
                    if member.startswith("_"):
                        continue
                    func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                    if not inspect.isroutine(func):
                        continue
                    doc = inspect.getdoc(getattr(obj, member, func)) or ""
                    if not doc.strip():
                        missing.append(f"{name}.{attr}.{member}")
    return sorted(set(missing))


def build(output: Path | None, modules: list[str] | None = None) -> list[str]:
    """Write the HTML reference into ``output`` (only check when None); returns the problems found."""
    import pdoc
    import pdoc.doc
    import pdoc.extract

    modules = modules or documented_modules()
    problems = [f"no docstring: {m}" for m in missing_docstrings(modules)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if output is not None:
            output.mkdir(parents=True, exist_ok=True)
            pdoc.pdoc(*_specs(modules), output_directory=output)
        else:
            for name in pdoc.extract.walk_specs(_specs(modules)):
                pdoc.doc.Module.from_name(name)
    # pdoc's own warnings (a module that fails to import, an annotation it
    # cannot resolve, a bad docstring link); not other libraries' deprecations.
    problems += [f"pdoc: {w.message}" for w in caught if w.filename and "pdoc" in Path(w.filename).parts]
    return problems


def main(argv: list[str] | None = None) -> int:
    """Build (or ``--check``) the API reference; 1 when a problem was found."""
    p = argparse.ArgumentParser(prog="python -m kiln.tools.docs", description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", default="build/docs", help="the HTML folder (default: build/docs)")
    p.add_argument("--check", action="store_true", help="check the docstrings and pdoc's warnings; write nothing")
    args = p.parse_args(argv)
    modules = documented_modules()
    problems = build(None if args.check else Path(args.output), modules)
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print(f"docs: {len(problems)} problem(s) in the API reference", file=sys.stderr)
        return 1
    where = "checked" if args.check else f"written to {args.output}/"
    print(f"docs: {len(modules)} modules {where} ({', '.join(modules)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
