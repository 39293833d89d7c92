"""Inputs kiln cannot read as they are (issue 35): a clean ShapeError naming
the input, or a correct result from a materialized copy -- on the ordinary
path and on the fast path (a frozen plan for a shape already called), for
torch tensors and numpy arrays; and bf16 / f16 in and out."""

import os
import subprocess
import sys
import textwrap

import ml_dtypes  # onnx (a test dependency) requires it
import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

import kiln
from kiln.errors import ShapeError

DYN = ({0: Dim("B", min=1, max=64)},)


class _Net(nn.Module):
    """Linear + ReLU; ``out`` casts the result (an f32 model with a bf16 output)."""

    def __init__(self, out=None):
        super().__init__()
        self.lin = nn.Linear(64, 32)
        self.out = out

    def forward(self, x):
        y = torch.relu(self.lin(x))
        return y if self.out is None else y.to(self.out)


@pytest.fixture(scope="module")
def f32_model():
    torch.manual_seed(0)
    m = _Net().eval()
    return m, kiln.compile(m, (torch.randn(2, 64),), DYN)


def _eager(m, x):
    with torch.no_grad():
        return m(torch.as_tensor(x))


# ----------------------------------------------------------------------------
# torch tensors kiln cannot read: meta (segfaulted), sparse, mkldnn, fake
# ----------------------------------------------------------------------------

_SUBPROCESS = textwrap.dedent("""
    import torch, kiln
    from torch import nn
    from torch.export import Dim
    m = nn.Sequential(nn.Linear(64, 32), nn.ReLU()).eval()
    c = kiln.compile(m, (torch.randn(2, 64),), ({0: Dim("B", min=1, max=64)},))
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        fake = torch.empty(5, 64)
    meta = torch.empty(5, 64, device="meta")
    def bad_calls():
        for t in (meta, fake):
            try:
                c(t)
            except kiln.ShapeError as e:
                print("ShapeError:", e, flush=True)
    bad_calls()  # the first calls at this shape: the ordinary path
    try:  # CompiledModel.run, given the binding, checks them too
        c.run((meta,), c.bind((meta,)))
    except kiln.ShapeError as e:
        print("ShapeError:", e, flush=True)
    x = torch.randn(5, 64)
    c(x), c(x)  # the shape's fast path is frozen now
    bad_calls()
    assert torch.allclose(c(x), m(x).detach(), atol=1e-5)
    print("done", flush=True)
""")


def test_meta_and_fake_tensors_are_shape_errors_not_segfaults():
    """A meta tensor, and a FakeTensor (which says it is on the CPU), have
    no memory: the kernels read address 0 (exit 139), first call or after
    the fast path of the shape was frozen."""
    proc = subprocess.run([sys.executable, "-c", _SUBPROCESS], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    meta = "ShapeError: input 'input' is on device 'meta'; kiln's CPU model needs CPU tensors"
    fake = ("ShapeError: input 'input' is a FakeTensor without memory kiln can read (a fake, functional or "
            "wrapper tensor); pass a plain CPU tensor")
    assert proc.stdout.count(meta) == 3, proc.stdout
    assert proc.stdout.count(fake) == 2, proc.stdout
    assert "done" in proc.stdout


@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "mkldnn"])
@pytest.mark.parametrize("after_fast", [False, True])
def test_non_strided_tensors_are_shape_errors(f32_model, kind, after_fast):
    """A sparse or mkldnn tensor raised a bare RuntimeError (from .contiguous()
    or data_ptr()) on either path."""
    m, c = f32_model
    x = torch.randn(7 if after_fast else 9, 64)
    if after_fast:
        c(x), c(x)
    t = {"sparse_coo": x.to_sparse, "sparse_csr": x.to_sparse_csr, "mkldnn": x.to_mkldnn}[kind]()
    with pytest.raises(ShapeError, match=rf"input 'x' is a _?{kind} tensor; kiln reads dense \(strided\) "
                                         r"tensors \(call \.to_dense\(\) on it first\)"):
        c(t)
    torch.testing.assert_close(c(x), _eager(m, x))  # the model is fine afterwards


@pytest.mark.parametrize("after_fast", [False, True])
def test_negative_view_is_materialized(f32_model, after_fast):
    """torch._neg_view(x) holds x in memory and means -x: kiln returned f(x)."""
    m, c = f32_model
    x = torch.randn(6 if after_fast else 4, 64)
    if after_fast:
        c(x.clone()), c(x.clone())
        assert c.runtime.fast(kiln.runtime.contract.arguments_key((x,))) is not None
    neg = torch._neg_view(x)
    assert neg.is_neg()
    torch.testing.assert_close(c(neg), _eager(m, -x))
    torch.testing.assert_close(c(neg), _eager(m, -x))  # a repeat takes the fast path if any: still -x


def test_non_contiguous_tensor_views_are_correct(f32_model):
    m, c = f32_model
    x = torch.randn(64, 8)
    for t in (x.t(), torch.randn(8, 128)[:, ::2], torch.randn(1, 64).expand(8, 64)):
        assert not t.is_contiguous()
        torch.testing.assert_close(c(t), _eager(m, t))
        torch.testing.assert_close(c(t), _eager(m, t))


# ----------------------------------------------------------------------------
# numpy arrays: byte order, alignment, layout, dtypes
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 64), (11, 64)])
def test_numpy_other_byte_order_is_converted(f32_model, shape):
    """'>f4' was refused ("has dtype >f4") although it is f32; twice at one
    shape, since the fast path must not hand its bytes over unswapped."""
    m, c = f32_model
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    big = x.astype(">f4")
    want = _eager(m, x).numpy()
    for _ in range(3):
        np.testing.assert_allclose(c(big), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c(x), want, rtol=1e-5, atol=1e-5)


def test_numpy_views_and_unaligned_arrays_are_correct(f32_model):
    m, c = f32_model
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 64)).astype(np.float32)
    raw = np.zeros(x.nbytes + 4, np.uint8)
    unaligned = np.frombuffer(raw.data, np.float32, count=x.size, offset=1).reshape(x.shape)
    unaligned[...] = x
    assert not unaligned.flags.aligned
    readonly = x.copy()
    readonly.flags.writeable = False
    views = {
        "fortran": np.asfortranarray(x),
        "strided": np.repeat(x, 2, axis=1)[:, ::2],
        "reversed": x[::-1],
        "broadcast": np.broadcast_to(x[:1], x.shape),
        "unaligned": unaligned,
        "readonly": readonly,
    }
    for name, v in views.items():
        want = _eager(m, np.ascontiguousarray(v)).numpy()
        for _ in range(3):  # ordinary path, then the fast path's key
            np.testing.assert_allclose(c(v), want, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("dtype, text", [(object, "object"), (np.float64, "f64"), (">f8", "f64"),
                                         (np.int32, "i32"), (np.complex64, "complex64")])
def test_numpy_wrong_dtypes_are_shape_errors(f32_model, dtype, text):
    _, c = f32_model
    x = np.zeros((3, 64), dtype=dtype)
    with pytest.raises(ShapeError, match=f"input 'x' has dtype {text}, but the model expects f32"):
        c(x)


# ----------------------------------------------------------------------------
# bf16 and f16 in and out
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def half_models():
    torch.manual_seed(0)
    out = {}
    for dt in (torch.bfloat16, torch.float16):
        m = nn.Sequential(nn.Linear(64, 32), nn.ReLU()).eval().to(dt)
        out[dt] = (m, kiln.compile(m, (torch.randn(2, 64, dtype=dt),), DYN))
    return out


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_half_model_torch_io(half_models, dt):
    m, c = half_models[dt]
    x = torch.randn(5, 64, dtype=dt)
    for _ in range(3):
        y = c(x)
        assert y.dtype == dt
        tol = 2e-2 if dt == torch.bfloat16 else 2e-3
        torch.testing.assert_close(y.float(), _eager(m, x).float(), rtol=tol, atol=tol)


def test_bf16_numpy_input_and_output(half_models):
    """An ml_dtypes bfloat16 array was refused ("has dtype bfloat16, but the
    model expects bf16"); the output comes back as one."""
    m, c = half_models[torch.bfloat16]
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    a = x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    for _ in range(3):
        y = c(a)
        assert isinstance(y, np.ndarray) and y.dtype == ml_dtypes.bfloat16
        np.testing.assert_allclose(y.astype(np.float32), _eager(m, x).float().numpy(), rtol=2e-2, atol=2e-2)


def test_f16_numpy_io(half_models):
    m, c = half_models[torch.float16]
    x = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float16)
    y = c(x)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), _eager(m, x).float().numpy(), rtol=2e-3, atol=2e-3)


@pytest.fixture(scope="module")
def bf16_out_model():
    torch.manual_seed(0)
    m = _Net(out=torch.bfloat16).eval()
    return m, kiln.compile(m, (torch.randn(2, 64),), DYN)


def test_bf16_output_of_a_numpy_call(bf16_out_model, monkeypatch):
    """A bf16 output of a numpy call escaped as a TypeError from Tensor.numpy():
    an ml_dtypes array, or float32 without ml_dtypes."""
    m, c = bf16_out_model
    x = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)
    want = _eager(m, x).float().numpy()
    y = c(x)
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-2, atol=2e-2)
    yt = c(torch.from_numpy(x))
    assert yt.dtype == torch.bfloat16
    np.testing.assert_array_equal(yt.float().numpy(), y.astype(np.float32))
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes raises ImportError
    y32 = c(x)
    assert y32.dtype == np.float32
    np.testing.assert_array_equal(y32, y.astype(np.float32))
