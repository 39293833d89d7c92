"""Compile generated kernels for a real GPU target without a GPU.

``triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget(...))``
runs the whole pipeline (TTIR -> TTGIR -> LLVM IR -> PTX -> cubin, ptxas is
bundled) with no device present, so a kernel that only interprets is caught.
It must run in a process that has not *interpreted* a kernel: the
interpreter patches ``triton.language`` for good.  :func:`compile_in_subprocess`
therefore runs this module (``python -m kiln.backends.triton.target``) on
the launch records of kernels run elsewhere.  The binaries go into the
kernel cache (kind ``binary``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["compile_in_subprocess", "compile_record"]


def compile_record(record: dict, arch: int = 90, backend: str = "cuda", warp_size: int = 32) -> dict:
    """Compile one launch record (``LaunchRecord.as_json()``); returns sizes of the products."""
    import importlib.util

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler import compile as triton_compile
    from triton.runtime.jit import JITFunction

    from ..cache import default_cache, make_key

    name = "kiln_target_" + hashlib.sha256(record["path"].encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, record["path"])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    fn = mod.kernel
    if not isinstance(fn, JITFunction):
        fn = JITFunction(fn.fn)
    constexprs = dict(record["constexprs"])
    if "UPCAST" in constexprs:  # the interpreter's bf16 workaround; real targets dot bf16 natively
        constexprs["UPCAST"] = False
    src = ASTSource(fn, record["signature"], constexprs)
    compiled = triton_compile(src, target=GPUTarget(backend, arch, warp_size))
    asm = compiled.asm
    binary = asm.get("cubin") or asm.get("hsaco") or b""
    digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    key = make_key("binary", digest, None, f"{backend}:{arch}")
    default_cache().put("binary", key, binary if isinstance(binary, bytes) else binary.encode(),
                        meta={"kernel": record["path"], "name": compiled.metadata.name})
    return {k: len(v) for k, v in asm.items() if isinstance(v, (str, bytes))}


def compile_in_subprocess(records: Sequence[dict], arch: int = 90, timeout: float = 600) -> list[dict]:
    """Compile launch records for ``cuda:<arch>`` in a fresh process; one result per record
    (``{"ok": True, "sizes": {...}}`` or ``{"ok": False, "error": "..."}``)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    payload = json.dumps({"records": list(records), "arch": arch})
    out = subprocess.run([sys.executable, "-m", "kiln.backends.triton.target"], input=payload, env=env,
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"target compilation process failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Read ``{"records": [...], "arch": N}`` on stdin, print the results as JSON."""
    job = json.loads(sys.stdin.read())
    results = []
    for rec in job["records"]:
        try:
            results.append({"ok": True, "sizes": compile_record(rec, job.get("arch", 90))})
        except Exception as e:  # reported per kernel, with the kernel named by the caller
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
