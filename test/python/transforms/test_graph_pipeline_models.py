"""The default graph pipeline on real models, end to end: imported from
PyTorch, optimized with ``kiln-default-cpu``, compiled by ``kiln.compile``
and run on the CPU, against PyTorch at several values per symbol; fusion
must reduce the kernel launches."""

import os
import sys

import numpy as np
import pytest
import torch

import kiln
from kiln._mlir import ir
from kiln.pipelines import Pipeline

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
from models import tiny_mlp, transformer_block  # noqa: E402


def _compile(factory, without=()):
    torch.manual_seed(0)
    mod, example, dynamic = factory()
    module = kiln.import_torch(mod, example, dynamic)
    with module.context, ir.Location.unknown():
        p = Pipeline.named("kiln-default-cpu", without=without)
        p.run(module)
        text = str(module)
    return mod, kiln.compile(text, optimize=False), p.statistics()


_CACHE = {}


def _compiled(factory):
    """One compilation per model for the whole module."""
    if factory not in _CACHE:
        _CACHE[factory] = _compile(factory)
    return _CACHE[factory]


@pytest.mark.parametrize(
    "factory, shapes",
    [
        (tiny_mlp, [(1, 16), (17, 16), (64, 16)]),
        (transformer_block, [(1, 1, 256), (2, 7, 256), (2, 40, 256)]),
    ],
    ids=["tiny_mlp", "transformer_block"],
)
def test_default_pipeline_numerics_and_launches(factory, shapes):
    mod, compiled, stats = _compiled(factory)
    assert stats["kiln-fuse"]["matmul_epilogue groups"] >= 2
    for shape in shapes:
        x = torch.randn(*shape)
        with torch.no_grad():
            want = mod(x).numpy()
        got = np.asarray(compiled(x.numpy()))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"shape {shape}")


def test_fusion_reduces_launches():
    """matmul + bias + gelu is one kernel: with kiln-fuse and partition fusion
    off the MLP needs more launches than with kiln-fuse."""
    from kiln.pipelines.registry import Option
    from kiln.transforms.partition import Partition

    _, fused, _ = _compiled(tiny_mlp)
    saved = Partition.options
    Partition.options = tuple(Option(o.name, o.type, False, o.help) if o.name == "fuse" else o for o in saved)
    try:
        _, unfused, _ = _compile(tiny_mlp, without=["kiln-fuse"])
    finally:
        Partition.options = saved
    assert len(fused.schedule) == 2  # linear+gelu, linear
    assert len(unfused.schedule) > len(fused.schedule)
