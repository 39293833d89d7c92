"""Issue 43, the frontend items: common dynamic-shape code (negative-index and
strided slices, stride-2 convolutions, derived Dims), literal tensors, and
uint8 masks import with exact symbolic dims and match eager PyTorch at the
min / max (and a middle) of every symbol.

The models are the lit tests' factories (test/Conversion/torch_to_kiln/
Inputs/issue43_models.py, checked there through ``kiln-import``)."""

import os
import sys

import numpy as np
import pytest
import torch
from kiln_ir_helpers import arg_dims, result_dims
from torch.export import Dim

import kiln
from kiln.dialects.dims import dim, evaluate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "Conversion", "torch_to_kiln", "Inputs"))
import issue43_models as m43  # noqa: E402


def _outputs(value):
    return [np.asarray(v) for v in (value if isinstance(value, (tuple, list)) else (value,))]


def _outputs_torch(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _imported(factory):
    """The factory's model imported, with no fallback op."""
    module, report = kiln.import_torch(*factory(), with_report=True)
    assert report.fallbacks == 0
    return module


def _check(factory, shapes):
    """Compile ``factory``'s model once; compare with eager at each set of input shapes."""
    model, args, spec = factory()
    compiled = kiln.compile(model, args, spec)
    for shape_set in shapes:
        inputs = [torch.randn(*s) for s in shape_set]
        got = _outputs(compiled(*[x.numpy() for x in inputs]))
        with torch.no_grad():
            want = _outputs([t.numpy() for t in _outputs_torch(model(*inputs))])
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_dim_arithmetic_takes_negative_constants():
    # The slice-from-the-end extents: L + -1, and a negative constant as the
    # left operand; a negative dim itself is still an error.
    seq = dim("L")
    assert str(seq + -1) == "L-1" and str(-1 + seq) == "L-1" and str(-3 - seq + 2 * seq) == "L-3"
    assert str((seq + -3) // 2 + 1) == "(L-3)/2+1"
    with pytest.raises(kiln.KilnError, match="negative"):
        dim(-1)


def test_floor_division_takes_out_whole_multiples():
    # A stride-2 slice of a 2*L dim is (2*L+1)/2: it must equal L, or the
    # verifier sees a false mismatch against an L-sized tensor.
    assert dim("(2*L+1)/2") == dim("L") and str(dim("(2*L-3)/2")) == "L-2"
    assert str(dim("(H-3)/2+1")) == "(H-3)/2+1" and str(dim("(4*B+63)/64")) == "(4*B+63)/64"
    for text in ("(3*L+1)/2", "(-3*L+100)/2", "(2*B*L+L)/2"):
        d = dim(text)
        for b, n in ((0, 0), (1, 5), (2, 6), (3, 11)):
            assert evaluate(d, {"B": b, "L": n}) == eval(text.replace("/", "//"), {}, {"B": b, "L": n})


def test_negative_index_slices_import_and_match_eager():
    module = _imported(m43.slices)
    assert result_dims(module) == [["B", "L-1"], ["B", "L-1"], ["B", "1"], ["B", "L-1"]]
    _check(m43.slices, [[(1, 6)], [(3, 17)], [(8, 64)]])


def test_strided_slices_import_and_match_eager():
    module = _imported(m43.strided)
    assert result_dims(module) == [["B", "(L+1)/2"], ["B", "(L+1)/3"]]
    _check(m43.strided, [[(1, 6)], [(2, 7)], [(5, 32)], [(8, 64)]])


def test_stride_two_unpadded_convolution_over_symbolic_dims():
    module = _imported(m43.strided_conv)
    assert result_dims(module) == [["B", "4", "(H-3)/2+1", "(W-3)/2+1"]]
    _check(m43.strided_conv, [[(1, 3, 5, 6)], [(2, 3, 12, 19)], [(4, 3, 32, 33)]])


def test_derived_dims_as_inputs():
    module = _imported(m43.derived)
    assert arg_dims(module) == [["B", "L"], ["B", "2*L"], ["B", "L+1"]]
    assert result_dims(module) == [["B", "2*L"], ["B", "L"]]
    _check(m43.derived, [[(b, n), (b, 2 * n), (b, n + 1)] for b, n in ((1, 6), (3, 21), (8, 64))])


def test_derived_dim_whose_root_is_in_no_input():
    module = _imported(m43.derived_only)
    assert arg_dims(module) == [["2", "L+1"]]
    assert result_dims(module)[0] == ["2", "L"]


class PositionTable(torch.nn.Module):
    """A position-id buffer longer than the declared sequence range, sliced to
    the input's length (BERT's ``position_ids[:, :L]`` with 512 positions)."""

    def __init__(self, persistent):
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("position_ids", torch.arange(1024).expand((1, -1)), persistent=persistent)
        self.table = torch.nn.Embedding(1024, 8)

    def forward(self, x):
        positions = self.position_ids[:, : x.shape[1]]
        return x + self.table(positions) + positions.unsqueeze(-1).float()


@pytest.mark.parametrize("persistent", [True, False])
def test_large_integer_literal_is_a_constant_not_a_fallback(persistent):
    # Its blob (8 KiB of si64) is elided in the converter's print of small
    # blobs: it once fell back ("constant of element type si64 without data").
    spec = ({0: Dim("B", min=1, max=4), 1: Dim("L", min=2, max=128)},)
    args = (torch.randn(2, 5, 8),)
    module, report = kiln.import_torch(PositionTable(persistent), args, spec, with_report=True)
    assert report.fallbacks == 0 and not report.unsupported
    assert result_dims(module) == [["B", "L", "8"]]
    _check(lambda: (PositionTable(persistent), args, spec), [[(1, 2, 8)], [(3, 77, 8)], [(4, 128, 8)]])


def _bert_with_mask():
    """BERT (random weights, 512 positions) called with an attention mask, L <= 128."""
    import transformers

    sys.path.insert(0, os.path.join(os.path.dirname(kiln.__file__), "examples"))
    from hf_models import WithPaddingMask

    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=32, intermediate_size=64,
                                  vocab_size=100, max_position_embeddings=512)
    model = WithPaddingMask(transformers.BertModel(cfg)).eval()
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0
    b, length = Dim("B", min=1, max=4), Dim("L", min=2, max=128)
    return model, (ids, mask), {"input_ids": {0: b, 1: length}, "attention_mask": {0: b, 1: length}}


def test_bert_with_mask_and_a_longer_position_table():
    model, args, spec = _bert_with_mask()
    module, report = kiln.import_torch(model, args, spec, with_report=True)
    assert report.fallbacks == 0 and not report.unsupported
    assert arg_dims(module) == [["B", "L"], ["B", "L"]] and result_dims(module) == [["B", "L", "32"]]
    compiled = kiln.compile(model, args, spec)
    for b, n in ((1, 2), (2, 37), (4, 128)):
        ids = torch.randint(0, 100, (b, n))
        mask = torch.ones_like(ids)
        mask[0, n // 2:] = 0
        got = np.asarray(compiled(ids.numpy(), mask.numpy()))
        with torch.no_grad():
            want = model(ids, mask).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


class BoolMask(torch.nn.Module):
    """A bool causal-mask buffer (GPT-Neo's ``bias``), which torch-mlir imports
    as a ``ui8`` literal converted to ``i1``; and a uint8 table of values up to 255."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(64, 64, dtype=torch.bool)), persistent=False)
        self.register_buffer("levels", (torch.arange(64) * 4).to(torch.uint8))

    def forward(self, x):
        n = x.shape[1]
        masked = torch.where(self.bias[:n, :n], x, torch.finfo(x.dtype).min)
        return masked, x * self.levels[:n].float()


def test_uint8_buffers_are_constants():
    seq = Dim("L", min=2, max=32)
    spec = ({0: Dim("B", min=1, max=4), 1: seq, 2: seq},)
    args = (torch.randn(2, 8, 8),)
    module, report = kiln.import_torch(BoolMask(), args, spec, with_report=True)
    assert report.fallbacks == 0 and not report.unsupported
    assert result_dims(module) == [["B", "L", "L"], ["B", "L", "L"]]
    _check(lambda: (BoolMask(), args, spec), [[(1, 2, 2)], [(3, 19, 19)], [(4, 32, 32)]])


def test_gpt_neo_imports_without_fallback_and_matches_eager():
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPTNeoConfig(num_layers=2, num_heads=4, hidden_size=64, vocab_size=100,
                                    max_position_embeddings=128, attention_types=[[["global", "local"], 1]],
                                    window_size=8, bos_token_id=0, eos_token_id=0)

    class LastHidden(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).last_hidden_state

    model = LastHidden(transformers.GPTNeoModel(cfg)).eval()
    args = (torch.randint(0, 100, (2, 8)),)
    spec = {"ids": {0: Dim("B", min=1, max=4), 1: Dim("L", min=2, max=64)}}
    _, report = kiln.import_torch(model, args, spec, with_report=True)
    assert report.fallbacks == 0 and not report.unsupported
    compiled = kiln.compile(model, args, spec)
    for b, n in ((1, 2), (2, 17), (4, 64)):
        ids = torch.randint(0, 100, (b, n))
        with torch.no_grad():
            want = model(ids).numpy()
        got = np.asarray(compiled(ids.numpy()))
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
