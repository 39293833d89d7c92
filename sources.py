"""Models named on a command line: ``model.onnx``, ``model.mlir`` or a
PyTorch factory ``pkg.module:factory``, with ``--symbol NAME=MIN:MAX`` ranges.

Used by the tools (``kiln-import``, ``kiln-compile``, ``kiln-run``, ``kiln``)
and by what the tools run (:mod:`kiln.validate`, :mod:`kiln.bench`): it lives
below all of them, so none imports ``tools/`` back (``test_layering.py``).
:func:`read_text` reads a text file or stdin as UTF-8, a bad byte being a
clean ``ParseError``.
"""

from __future__ import annotations

import importlib
import os
import sys

from .errors import KilnError, ParseError

__all__ = ["decode_utf8", "load_factory", "parse_symbol", "read_text", "source_args"]


def decode_utf8(data: bytes, source: str) -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark dropped); a
    ``ParseError`` naming ``source`` and the line and column of the first
    byte that is not UTF-8 otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        # Offsets count the BOM, when there is one, as the file does.
        start = e.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        line = data.count(b"\n", 0, start) + 1
        col = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise ParseError(
            f"{source}:{line}:{col}: input is not UTF-8 text (byte 0x{data[start]:02x}); "
            "kiln reads .mlir files as UTF-8"
        ) from None


def read_text(path: str, what: str = "input file") -> tuple[str, str]:
    """``(text, source name)`` of the file ``path`` (``-``: stdin), read as
    UTF-8; ``ParseError`` for bytes that are not UTF-8, ``KilnError`` for a
    file that cannot be read."""
    if path == "-":
        raw = getattr(sys.stdin, "buffer", None)  # None: a text stream put in its place
        return (decode_utf8(raw.read(), "<stdin>") if raw is not None else sys.stdin.read()), "<stdin>"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise KilnError(f"could not open {what} '{path}': {e.strerror or e}") from None
    return decode_utf8(data, path), path


def parse_symbol(text: str):
    """``(name, (min, max))`` of a ``--symbol NAME=MIN:MAX`` argument."""
    name, sep, rng = text.partition("=")
    lo, sep2, hi = rng.partition(":")
    if not sep or not sep2 or not name:
        raise KilnError(f"--symbol expects NAME=MIN:MAX, got '{text}'")
    try:
        return name, (int(lo), int(hi))
    except ValueError:
        raise KilnError(f"--symbol expects integer bounds, got '{text}'") from None


def load_factory(spec: str):
    """``(module, example_args, dynamic_shapes)`` from the factory ``pkg.module:fn``
    (a factory returning two values gets ``dynamic_shapes=None``)."""
    mod_name, _, fn_name = spec.partition(":")
    try:
        module = importlib.import_module(mod_name)
    except Exception as e:  # the user's module: ImportError, SyntaxError, whatever it raises
        raise KilnError(f"cannot import '{mod_name}': {type(e).__name__}: {e}") from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise KilnError(f"'{mod_name}' has no factory '{fn_name}'")
    try:
        out = fn()
    except KilnError:
        raise
    except Exception as e:  # the user's code failed, not kiln
        raise KilnError(f"factory '{spec}' raised {type(e).__name__}: {e}") from None
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise KilnError(f"factory '{spec}' must return (module, example_args, dynamic_shapes)")
    return out if len(out) == 3 else (*out, None)


def source_args(source: str, symbols: list[str]):
    """``(source, example_args, dynamic_shapes, symbols)`` for :func:`kiln.compile`
    from a command-line source (path or ``pkg.module:factory``)."""
    syms = dict(parse_symbol(s) for s in symbols) or None
    if ":" in source and not os.path.exists(source):
        if syms:
            raise KilnError("--symbol applies to ONNX models; a factory's dynamic_shapes give the ranges")
        module, example_args, dynamic_shapes = load_factory(source)
        return module, example_args, dynamic_shapes, None
    if not os.path.exists(source):
        raise KilnError(f"no such file: '{source}'")
    if not source.endswith(".onnx"):
        # kiln.compile reads a .mlir path itself; check here that it can be
        # read, as UTF-8, so a bad file is a clean error naming it.
        if os.path.isdir(source):
            raise KilnError(f"'{source}' is a directory, not a model file or a kiln artifact")
        read_text(source, "model file")
    return source, None, None, syms
