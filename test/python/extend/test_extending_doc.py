"""docs/EXTENDING.md's examples run as written (issue 40).

The ```python blocks run in order in one namespace: the FlashAttention
custom op with its CPU kernel compiles with fallback=False and matches
eager (asserted inside the block); the registered decomposition then turns
the same op into kiln.attention, compiled as generated code.  Everything the
document registers is unregistered afterwards.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

import kiln
from kiln.backends.cpu import library
from kiln.backends.registry import REGISTRY
from kiln.backends.user import unregister_decomposition

DOC = Path(__file__).resolve().parents[3] / "docs" / "EXTENDING.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_extending_md_examples_run():
    code = blocks()
    assert len(code) == 4
    ns: dict = {}
    try:
        for block in code:
            exec(compile(block, str(DOC), "exec"), ns)  # noqa: S102 - the document's own examples
        # The decomposition (last block) now wins over the user's kernel: kiln.attention, on kiln's own
        # kernel (the native flash attention that kiln-select-kernels chooses where the runtime has it).
        model = ns["model"]
        compiled = kiln.compile(model, ns["example"], ns["dynamic"], fallback=False)
        report = compiled.report()
        assert report["fallback"]["ops"] == 0
        native = library.enabled() and library.native_enabled()
        impls = {part for k in report["kernels"] for part in k["impl"].split("+")}
        assert impls <= {"generated", "native.attention", "native.gemm"} and ("native.attention" in impls) == native
        assert any("kiln.attention" in k["ops"] for k in report["kernels"])
        for b, n in [(1, 1), (5, 77), (8, 512)]:
            args = tuple(torch.randn(b, 4, n, 64) for _ in range(3))
            np.testing.assert_allclose(compiled(*args).numpy(), model(*args).detach().numpy(), atol=1e-4)
    finally:
        REGISTRY.unregister("flash_attention_cpu", "cpu")
        REGISTRY.unregister("flash_attention_torch", "cuda")
        REGISTRY.unregister("softmax_cpu", "cpu")
        unregister_decomposition("mylib::flash_attention")
