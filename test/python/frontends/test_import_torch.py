"""import_torch: the bench models, symbols and ranges, derived dims, locations,
the report, fallback and bad input; numerics through kiln.compile."""

import numpy as np
import pytest
import torch
from kiln_ir_helpers import arg_dims, kiln_ops, result_dims
from torch.export import Dim

import kiln
from kiln._mlir import ir
from kiln.bench import models
from kiln.dialects.kiln import tensor_info
from kiln.module import symbols_of, verify_module

BENCH = {
    # name: (symbol ranges, argument dims, result dims)
    "mlp": ({"B": (1, 64)}, [["B", "1024"]], [["B", "1024"]]),
    "transformer_block": ({"B": (1, 64), "L": (1, 512)}, [["B", "L", "256"]], [["B", "L", "256"]]),
    "small_cnn": ({"B": (1, 64)}, [["B", "3", "32", "32"]], [["B", "10"]]),
    "tiny_mlp": ({"B": (1, 64)}, [["B", "16"]], [["B", "8"]]),
}


@pytest.fixture(scope="module")
def imported():
    """Each bench model imported once (the imports dominate this file's time)."""
    return {name: kiln.import_torch(*models.FACTORIES[name](), with_report=True) for name in BENCH}


@pytest.mark.parametrize("name", sorted(BENCH))
def test_bench_model_symbols_ranges_and_dims(imported, name):
    module, report = imported[name]
    ranges, args, results = BENCH[name]
    verify_module(module.operation)
    assert {s: (i.min, i.max) for s, i in symbols_of(module.operation).items()} == ranges
    assert arg_dims(module) == args
    assert result_dims(module) == results
    assert report.fallbacks == 0 and report.fallback_rate == 0.0
    assert not any(op.name == "kiln.fallback" for op in kiln_ops(module))


def test_transformer_block_ops_and_report(imported):
    module, report = imported["transformer_block"]
    names = [op.name for op in kiln_ops(module)]
    assert names.count("kiln.attention") == 1 and names.count("kiln.layer_norm") == 2
    assert names.count("kiln.matmul") == 4
    attn = next(op for op in kiln_ops(module) if op.name == "kiln.attention")
    assert attn.opview.attr("causal") is True
    assert [str(d) for d in tensor_info(attn.results[0].type).dims] == ["B", "4", "L", "64"]
    assert report.ops["aten.linear"] == {"converted": 0, "decomposed": 4, "fallback": 0}
    assert report.ops["aten.scaled_dot_product_attention"]["converted"] == 1
    # Exported without re-tracing (nothing to decompose): q, k, v come out of one unbind.
    assert report.ops["aten.unbind.int"] == {"converted": 0, "decomposed": 1, "fallback": 0}
    assert report.total() == 15 and report.flops["converted"] > 0


def test_report_counts_tiny_mlp(imported):
    _, report = imported["tiny_mlp"]
    assert report.ops == {
        "aten.linear": {"converted": 0, "decomposed": 2, "fallback": 0},
        "aten.gelu": {"converted": 1, "decomposed": 0, "fallback": 0},
    }
    data = report.to_dict()
    assert data["totals"] == {"converted": 1, "decomposed": 2, "fallback": 0}
    assert data["symbols"] == {"B": [1, 64]}
    # FLOPs at B=8: two matmuls 2*8*16*32 + 2*8*32*8, adds, gelu.
    assert data["flops"]["converted"] == 2 * 8 * 16 * 32 + 2 * 8 * 32 * 8 + 8 * 32 * 2 + 8 * 8


def test_every_op_has_a_source_location_and_weights_stay_resources(imported):
    module, _ = imported["transformer_block"]
    constants = 0
    for op in kiln_ops(module):
        assert "models.py" in str(op.location), (op.name, str(op.location))
        if op.name == "kiln.constant":
            constants += 1
            # Casting checks the attribute kind (raises for a dense<...> list).
            ir.DenseResourceElementsAttr(op.attributes["value"])
    assert constants == 12


class Derived(torch.nn.Module):
    """Dims 2*L (concat along L) and L+1 (pad one row)."""

    def forward(self, x):
        doubled = torch.cat([x, x], dim=1)
        padded = torch.nn.functional.pad(x, (0, 0, 0, 1))
        return doubled, padded


def test_derived_dims_become_expressions():
    x = torch.randn(2, 5, 4)
    module = kiln.import_torch(Derived(), (x,), ({0: Dim("B", min=1, max=8), 1: Dim("L", min=2, max=100)},))
    assert result_dims(module) == [["B", "2*L", "4"], ["B", "L+1", "4"]]
    assert {s: (i.min, i.max) for s, i in symbols_of(module.operation).items()} == {"B": (1, 8), "L": (2, 100)}


class WithBessel(torch.nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x) + 1.0


def test_unsupported_op_falls_back_with_its_name_and_types():
    module, report = kiln.import_torch(WithBessel(), (torch.randn(3, 4),), ({0: Dim("B", max=16)},), with_report=True)
    fb = [op for op in kiln_ops(module) if op.name == "kiln.fallback"]
    assert len(fb) == 1 and fb[0].opview.attr("op_name").startswith("aten.special_bessel_j0")
    assert [str(d) for d in tensor_info(fb[0].results[0].type).dims] == ["B", "4"]
    assert report.ops[next(k for k in report.ops if "bessel_j0" in k)]["fallback"] == 1 and report.fallback_rate == 0.5
    assert "bessel_j0" in report.unsupported[0][0] and "test_import_torch.py" in report.unsupported[0][1]


def test_fallback_false_raises_listing_each_op_and_location():
    with pytest.raises(kiln.UnsupportedError) as e:
        kiln.import_torch(WithBessel(), (torch.randn(3, 4),), fallback=False)
    text = str(e.value)
    assert "1 op(s) kiln cannot convert" in text
    assert "bessel_j0" in text and "test_import_torch.py" in text and "no kiln pattern for this op" in text


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # torch.export cannot trace data-dependent control flow
            return x + 1
        return x - 1


def test_torch_export_failure_is_a_kiln_error():
    with pytest.raises(kiln.KilnError, match=r"torch.export failed for DataDependent: \w+"):
        kiln.import_torch(DataDependent(), (torch.randn(3),))


class FullSlice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.tril(torch.ones(8, 8, dtype=torch.bool)))

    def forward(self, x):
        n = x.shape[0]
        return torch.where(self.table[:n, :n], x, 0.0)  # torch guards L != 8 (the whole table) at export


def test_violated_constraints_say_which_values_fail():
    """The lines of torch's message that say which values of a Dim fail are
    kept (the first line alone says only "Constraints violated (L)!"), the
    advice on logs and draft_export is not."""
    seq = torch.export.Dim("L", min=2, max=8)
    with pytest.raises(kiln.KilnError) as info:
        kiln.import_torch(FullSlice(), (torch.randn(4, 4),), dynamic_shapes=({0: seq, 1: seq},))
    text = str(info.value)
    assert "Constraints violated (L)" in text and "!= 8" in text and "draft_export" not in text


def test_bad_dim_range_is_a_kiln_error():
    class FakeDim:  # torch's Dim asserts min <= max itself; kiln checks duck-typed specs too
        __name__ = "B"
        min, max = 10, 2

    with pytest.raises(kiln.KilnError, match="symbol 'B' has min 10 > max 2"):
        kiln.import_torch(models.MLP(4, 8, 4), (torch.randn(3, 4),), ({0: FakeDim()},))


def test_context_comes_with_the_module(imported):
    module, _ = imported["tiny_mlp"]
    with module.context:
        assert "kiln.matmul" in str(module)


@pytest.mark.parametrize("name,batches", [("tiny_mlp", (1, 17, 64)), ("small_cnn", (1, 5, 64))])
def test_numerics_against_pytorch(name, batches):
    torch_module, args, shapes = models.FACTORIES[name]()
    compiled = kiln.compile(torch_module, args, shapes)
    for b in batches:
        x = torch.randn(b, *args[0].shape[1:])
        got = np.asarray(compiled(x.numpy()))
        np.testing.assert_allclose(got, torch_module(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_transformer_block_numerics_at_several_lengths():
    torch_module, args, shapes = models.transformer_block()
    compiled = kiln.compile(torch_module, args, shapes)
    for b, seq in ((1, 1), (2, 7), (3, 33)):
        x = torch.randn(b, seq, 256)
        got = np.asarray(compiled(x.numpy()))
        np.testing.assert_allclose(got, torch_module(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_shape_errors_name_the_forward_parameter():
    class Double(torch.nn.Module):
        def forward(self, tokens):
            return tokens * 2.0

    compiled = kiln.compile(Double(), (torch.randn(2, 3),), dynamic_shapes=({0: Dim("B", min=1, max=4)},))
    with pytest.raises(kiln.ShapeError, match=r"^input 'tokens' axis 0: B = 5 violates 1 <= B <= 4"):
        compiled(torch.randn(5, 3))


def test_decomposition_table_drops_exactly_the_kept_ops():
    from kiln.frontends.export_fixes import KEEP_WHOLE, KILN_DECOMPOSITIONS, decomposition_table

    # Popped by overload name (the table stays lazy), the same ops go as by key
    # prefix; kiln's own decompositions (GroupNorm) are added.
    expected = {op for op in torch.export.default_decompositions().keys() if not str(op).startswith(KEEP_WHOLE)}
    table = decomposition_table()
    assert set(table.keys()) == expected | set(KILN_DECOMPOSITIONS)
    for op, fn in KILN_DECOMPOSITIONS.items():
        assert table[op] is fn
    assert torch.ops.aten.linear.default not in expected


def test_decomposition_runs_only_when_it_changes_something():
    """A program whose every op kiln converts skips run_decompositions (a
    second trace); an op in torch's table, or a buffer mutation, keeps it."""
    from kiln.frontends.export_fixes import decomposition_table, needs_decomposition
    from kiln.frontends.torch_import import _converts

    table = decomposition_table()

    def exported(module, x):
        return torch.export.export(module, (x,), dynamic_shapes=({0: Dim("B", min=1, max=8)},))

    block, args, dynamic = models.FACTORIES["transformer_block"]()
    assert not needs_decomposition(torch.export.export(block, args, dynamic_shapes=dynamic), table, _converts)

    class Swish(torch.nn.Module):  # hardswish is in torch's table: decomposed
        def forward(self, x):
            return torch.nn.functional.hardswish(x) + 1

    assert needs_decomposition(exported(Swish(), torch.randn(2, 3)), table, _converts)

    class Count(torch.nn.Module):  # mutates a buffer
        def __init__(self):
            super().__init__()
            self.register_buffer("n", torch.zeros(1))

        def forward(self, x):
            self.n.add_(1)
            return x * 2

    assert needs_decomposition(exported(Count(), torch.randn(2, 3)), table, _converts)
    model = kiln.compile(Swish(), (torch.randn(2, 3),), dynamic_shapes=({0: Dim("B", min=1, max=8)},))
    x = torch.randn(5, 3) * 4
    torch.testing.assert_close(model(x), Swish()(x), rtol=1e-5, atol=1e-6)


class _MaskCode(torch.nn.Module):
    """The ops transformers' mask and embedding code adds to a model
    (``masking_utils``: ``diff`` with ``prepend``, ``new_ones``, ``&``,
    ``to(dtype, layout=...)``, ``to(device)``; ``arange``, ``split``,
    ``squeeze``, ``unflatten``), each converted whole."""

    def forward(self, x, pos):
        steps = torch.diff(pos, prepend=pos[:, :1] - 1, dim=-1)
        packed = (steps != 1).cumsum(-1)
        ones = x.new_ones((x.shape[0], x.shape[1]))
        keep = (pos > 0) & (pos < 5)
        rows = torch.arange(x.shape[1]).to(x.dtype)
        a, b = x.split(2, dim=-1)
        y = (a * b).unflatten(-1, (1, 2)).squeeze(-2)
        z = torch.ops.aten.to.dtype_layout(y, dtype=torch.float32, layout=torch.strided) + ones[..., None]
        w = torch.ops.aten.to.device(z, torch.device("cpu"), torch.float32)
        return w * keep[..., None] + rows[:, None] + packed[..., None]


def test_mask_code_skips_the_decomposition_and_matches_eager():
    """transformers' mask code no longer forces a second trace of the whole
    program (run_decompositions: GPT-2's and LLaMA's export time halved);
    its ops convert whole and match eager at the smallest, a middle and the largest B."""
    from kiln.frontends.export_fixes import decomposition_table, needs_decomposition
    from kiln.frontends.torch_import import _converts

    spec = ({0: Dim("B", min=1, max=9)}, {0: Dim("B", min=1, max=9)})
    example = (torch.randn(3, 5, 4), torch.randint(0, 7, (3, 5)))
    ep = torch.export.export(_MaskCode(), example, dynamic_shapes=spec)
    assert not needs_decomposition(ep, decomposition_table(), _converts)
    model = kiln.compile(_MaskCode(), example, dynamic_shapes=spec, fallback=False)
    for batch in (1, 4, 9):
        x, pos = torch.randn(batch, 5, 4), torch.randint(0, 7, (batch, 5))
        torch.testing.assert_close(model(x, pos), _MaskCode()(x, pos), rtol=1e-5, atol=1e-6)


def test_inplace_ops_on_fresh_values_need_no_decomposition():
    """``relu_`` / ``+=`` on a value the graph computed become their functional
    twins, later reads of it reading the result (torchvision's ResNet and
    MobileNetV2 import without a second trace); on a view, an input, or mixing
    dtypes they are left to the decomposition.  Each matches eager at B = 1, 4, 9."""
    from kiln.frontends.export_fixes import decomposition_table, functionalize_inplace, needs_decomposition
    from kiln.frontends.torch_import import _converts

    class Fresh(torch.nn.Module):
        def forward(self, x):
            h = x * 2
            g = x - 1
            g += h  # reads h before h is written: the value before the ReLU
            h.relu_()
            h += x  # the residual add, in place
            return h * 3 + h.sum(-1, keepdim=True) + g  # reads of h after the writes

    class OnView(torch.nn.Module):
        def forward(self, x):
            h = x * 2
            h[:, :2].relu_()  # writes through a view of h
            return h

    class OnInput(torch.nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2

    class Mixed(torch.nn.Module):  # in place keeps f16; add would promote to f32
        def forward(self, x):
            h = x.half() * 2
            h.add_(x)
            return h

    spec = ({0: Dim("B", min=1, max=9)},)
    for module, rewritten in ((Fresh(), 3), (OnView(), 0), (OnInput(), 0), (Mixed(), 0)):
        ep = torch.export.export(module, (torch.randn(3, 4),), dynamic_shapes=spec)
        assert functionalize_inplace(ep) == rewritten, type(module).__name__
        assert needs_decomposition(ep, decomposition_table(), _converts) == (rewritten == 0)
    for module in (Fresh(), OnView()):
        model = kiln.compile(module, (torch.randn(3, 4),), dynamic_shapes=spec)
        for batch in (1, 4, 9):
            x = torch.randn(batch, 4)
            torch.testing.assert_close(model(x), module(x.clone()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_unbind_numerics(batch):
    """``unbind`` converted whole (it is not decomposed): one slice per item."""

    class Mix(torch.nn.Module):
        def forward(self, x):
            a, b, c = x.unbind(-1)
            p, q = x.unbind(1)
            return a * 2 + b - c, (p - q).sum(-1)

    spec = ({0: Dim("B", min=1, max=64)},)
    model = kiln.compile(Mix(), (torch.randn(3, 2, 3),), dynamic_shapes=spec)
    assert model.report()["fallback"]["ops"] == 0
    x = torch.randn(batch, 2, 3)
    for got, want in zip(model(x), Mix()(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_aliased_example_inputs_stay_distinct_inputs():
    """torch.export merges inputs that are the same tensor; kiln clones them first."""

    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    x = torch.randn(2, 4, 16, 8)
    spec = {0: Dim("B", min=1, max=8), 2: Dim("L", min=1, max=64)}
    model = kiln.compile(Attn(), (x, x, x), dynamic_shapes=(spec, spec, spec))
    q, k, v = (torch.randn(3, 4, 20, 8) for _ in range(3))
    with torch.no_grad():
        ref = Attn()(q, k, v)
    torch.testing.assert_close(model(q, k, v), ref, rtol=1e-4, atol=1e-5)


class _Pool(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.max_pool2d(torch.relu(x), 3, 2, 1)


class _PoolIndices(torch.nn.Module):
    def forward(self, x):
        y, idx = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
        return y + idx.to(y.dtype)


def test_max_pool_is_kiln_not_a_fallback():
    """torch.export decomposes max_pool2d to max_pool2d_with_indices; with
    the indices unused it becomes kiln.max_pool2d (it was a PyTorch fallback)."""
    spec = ({0: Dim("B", min=1, max=16)},)
    module, report = kiln.import_torch(_Pool(), (torch.randn(2, 8, 15, 15),), spec, with_report=True)
    assert report.fallbacks == 0
    assert [op.name for op in kiln_ops(module)].count("kiln.max_pool2d") == 1
    compiled = kiln.compile(_Pool(), (torch.randn(2, 8, 15, 15),), spec)
    assert compiled.report()["fallback"]["ops"] == 0
    for b in (1, 5, 16):
        x = torch.randn(b, 8, 15, 15)
        np.testing.assert_allclose(np.asarray(compiled(x.numpy())), _Pool()(x).numpy(), rtol=0, atol=0)


def test_max_pool_with_used_indices_still_falls_back():
    _, report = kiln.import_torch(_PoolIndices(), (torch.randn(2, 3, 8, 8),), with_report=True)
    assert report.fallbacks == 1
