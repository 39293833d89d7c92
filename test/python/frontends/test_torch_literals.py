"""FastLiterals (weights copied into blobs, not read through tolist) and the
resource record: the imported IR is the one torch-mlir's own path makes, and
a recorded blob reads back the bytes MLIR prints for it."""

import gc
import warnings
import weakref

import numpy as np
import torch
from torch.export import Dim
from torch_mlir.extras.fx_importer import FxImporter

import kiln
from kiln._mlir import ir
from kiln.context import make_context
from kiln.frontends.torch_import import export_program
from kiln.frontends.torch_literals import FastLiterals
from kiln.transforms._resources import _printed_blob, register_resource, resource_bytes


class Mixed(torch.nn.Module):
    """Weights of several dtypes, a tied weight, a non-contiguous buffer and a one-element one."""

    def __init__(self, mask: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.use_mask = mask  # kiln converts no ui8 constant: the bool mask is for the import check only
        self.fc = torch.nn.Linear(8, 6)
        self.fc2 = torch.nn.Linear(6, 6)
        self.fc2.weight = torch.nn.Parameter(torch.randn(6, 6))
        self.register_buffer("idx", torch.tensor([5, 0, 3, 1, 2, 4], dtype=torch.int64))
        self.register_buffer("scale16", torch.randn(6).half())
        self.register_buffer("mask", torch.tensor([True, False, True, True, False, True]))
        self.register_buffer("tmat", torch.randn(6, 6).t())  # a transposed (non-contiguous) view
        self.register_buffer("one", torch.tensor([2.5]))

    def forward(self, x):
        h = self.fc(x)
        h = self.fc2(h) + torch.nn.functional.linear(h, self.fc2.weight)  # the tied weight, twice
        h = h @ self.tmat + self.scale16.float() * self.one
        if self.use_mask:
            h = torch.where(self.mask, h, -h)
        return torch.index_select(h, 1, self.idx)


def _constants(module) -> list:
    """The ``kiln.constant`` ops of the module's functions holding dense_resource data."""
    out = []
    for fn in module.body.operations:
        if fn.operation.name != "func.func":
            continue
        for op in fn.operation.regions[0].blocks[0].operations:
            if op.operation.name == "kiln.constant" and "dense_resource" in str(op.operation.attributes["value"]):
                out.append(op.operation)
    return out


def _import_text(hooks) -> str:
    model = Mixed().eval()
    ep = export_program(model, (torch.randn(3, 8),), ({0: Dim("B", min=1, max=16)},))
    ctx = make_context(torch=True)
    with ctx, ir.Location.unknown(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importer = FxImporter(context=ctx, hooks=hooks)
        importer.import_frozen_program(ep, func_name="main", import_symbolic_shape_expressions=True)
        return importer.module.operation.get_asm()


def test_fast_literals_import_the_same_ir_as_torch_mlir():
    fast, default = _import_text(FastLiterals()), _import_text(None)
    assert "dense_resource<torch_tensor_6_6_torch.float32" in fast
    assert "torch_tensor_6_torch.int64" in fast and "torch_tensor_6_torch.float16" in fast
    assert fast == default  # blob names, types and bytes


def test_recorded_blobs_read_back_what_mlir_prints():
    model = Mixed(mask=False).eval()
    module = kiln.import_torch(model, (torch.randn(3, 8),), ({0: Dim("B", min=1, max=16)},))
    checked = 0
    with module.context:
        for op in _constants(module):
            recorded = resource_bytes(op.attributes["value"])  # no op given: the record only
            assert recorded is not None
            assert bytes(recorded) == bytes(_printed_blob(op))
            checked += 1
    assert checked >= 4


def test_weights_changed_after_import_do_not_change_the_blob():
    model = torch.nn.Linear(4, 3).eval()
    module = kiln.import_torch(model, (torch.randn(2, 4),), ({0: Dim("B", min=1, max=8)},))
    expected = model.weight.detach().numpy().copy()
    with torch.no_grad():
        model.weight.add_(1.0)
    with module.context:
        blobs = [resource_bytes(op.attributes["value"], op) for op in _constants(module)]
    assert any(b is not None and b.size == expected.nbytes and np.array_equal(b.view(np.float32), expected.ravel())
               for b in blobs)


def test_records_are_per_context_and_die_with_it():
    data = np.arange(12, dtype=np.float32)
    ctx = make_context()
    with ctx, ir.Location.unknown():
        t = ir.RankedTensorType.get([12], ir.F32Type.get())
        attr = ir.DenseResourceElementsAttr.get_from_buffer(data, "w", t)
        register_resource(attr, data)
        assert bytes(resource_bytes(attr)) == data.tobytes()
    other = make_context()
    with other, ir.Location.unknown():
        # Same name, same type, other context: a different blob, never the record.
        t2 = ir.RankedTensorType.get([12], ir.F32Type.get())
        attr2 = ir.DenseResourceElementsAttr.get_from_buffer(np.zeros(12, np.float32), "w", t2)
        assert str(attr2) == str(attr)
        assert resource_bytes(attr2) is None
    ref = weakref.ref(ctx)
    del ctx, attr, t
    gc.collect()
    assert ref() is None  # the record does not keep the context alive


def test_warm_compile_with_other_weights_gives_their_results():
    """Two models of one architecture, compiled back to back in one process:
    each gives its own weights' results (the blobs are recorded per import)."""
    x = torch.randn(5, 16)
    dyn = ({0: Dim("B", min=1, max=64)},)
    outs = []
    for seed in (1, 2, 1):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()
        compiled = kiln.compile(model, (torch.randn(4, 16),), dynamic_shapes=dyn)
        with torch.no_grad():
            expected = model(x)
        got = compiled(x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        outs.append(got)
    assert not torch.allclose(outs[0], outs[1])
    torch.testing.assert_close(outs[0], outs[2])
