"""ONNX models as users have them (issue 36): external data beside the model,
the graph's input and output names (keyword and dict calls, errors, kiln-run,
artifacts), and types kiln lacks named in an UnsupportedError."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import kiln
from kiln.errors import KilnError, ParseError, ShapeError, UnsupportedError
from kiln.frontends import onnx_external

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs, list(inits)),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _dense_model(k=160, n=128):
    """y = reshape(x @ W + b, [-1, n // 2, 2]); z = reduce_sum(x * mask): W
    is larger than onnx_external.DEFER_BYTES, the Reshape's shape is small
    (shape inference reads it)."""
    w = RNG.standard_normal((k, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(b, "bias"),
             onnx.numpy_helper.from_array(np.array([-1, n // 2, 2], np.int64), "shape")]
    nodes = [h.make_node("MatMul", ["x", "W"], ["xw"]), h.make_node("Add", ["xw", "bias"], ["lin"]),
             h.make_node("Reshape", ["lin", "shape"], ["y"]), h.make_node("Mul", ["x", "mask"], ["xm"]),
             h.make_node("ReduceSum", ["xm"], ["z"], keepdims=0)]
    ins = [h.make_tensor_value_info("x", T.FLOAT, ["B", k]), h.make_tensor_value_info("mask", T.FLOAT, ["B", k])]
    outs = [h.make_tensor_value_info("y", T.FLOAT, ["B", n // 2, 2]), h.make_tensor_value_info("z", T.FLOAT, [])]
    return _model(nodes, ins, outs, inits)


def _save_external(model, directory, name="model.onnx"):
    """The layout torch.onnx.export(..., dynamo=True) writes: every tensor
    in one ``<name>.data`` file beside the model."""
    path = os.path.join(directory, name)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # save_model moves the data out of the proto it is given
    onnx.save_model(copy, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=f"{name}.data", size_threshold=0)
    return path


def _feeds(b, k=160):
    return {"x": RNG.standard_normal((b, k)).astype(np.float32),
            "mask": (RNG.random((b, k)) > 0.5).astype(np.float32)}


def _session(path):
    # (ONNX Runtime cannot read a Reshape's shape from external data: in memory)
    return ort.InferenceSession(onnx.load(path).SerializeToString())


def _check(compiled, path, sizes=(1, 5, 33)):
    sess = _session(path)
    for b in sizes:
        feeds = _feeds(b)
        want = sess.run(None, feeds)
        got = compiled(feeds)  # dict in, dict out
        assert list(got) == [o.name for o in sess.get_outputs()]
        for g, w in zip(got.values(), want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        pos = compiled(feeds["x"], feeds["mask"])
        kw = compiled(mask=feeds["mask"], x=feeds["x"])
        for p, k, w in zip(pos, kw, want):
            np.testing.assert_allclose(p, w, rtol=1e-4, atol=1e-4)
            np.testing.assert_array_equal(p, k)


def test_external_data_one_file(tmp_path):
    model = _dense_model()
    path = _save_external(model, tmp_path)
    stored = onnx.load(path, load_external_data=False)
    assert all(t.data_location == T.EXTERNAL for t in stored.graph.initializer)
    compiled = kiln.compile(path)
    assert [s.name for s in compiled.inputs] == ["x", "mask"]
    assert compiled.output_names == ["y", "z"]
    _check(compiled, path)


def test_external_data_per_tensor_files(tmp_path):
    """onnx.save_model's other layout: one file per tensor, small ones inline."""
    path = os.path.join(tmp_path, "m.onnx")
    onnx.save_model(_dense_model(), path, save_as_external_data=True, all_tensors_to_one_file=False,
                    size_threshold=256)
    assert sorted(os.listdir(tmp_path)) == ["W", "bias", "m.onnx"]
    _check(kiln.compile(path), path, sizes=(2,))


def test_torch_exported_external_data(tmp_path):
    """torch.onnx.export(..., dynamo=True, external_data=True): torch 2.13's
    default exporter (it needs onnxscript, which the test extra installs)."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(160, 128)

        def forward(self, x, mask):
            return self.lin(x * mask)

    path = os.path.join(tmp_path, "net.onnx")
    x = torch.randn(3, 160)
    torch.onnx.export(Net().eval(), (x, torch.ones(3, 160)), path, dynamo=True, external_data=True,
                      dynamic_shapes=({0: torch.export.Dim("B")}, {0: torch.export.Dim("B")}))
    assert os.path.exists(path + ".data")
    compiled = kiln.compile(path)
    assert [s.name for s in compiled.inputs] == ["x", "mask"]
    sess = _session(path)
    for b in (1, 7):
        feeds = _feeds(b)
        np.testing.assert_allclose(compiled(**feeds), sess.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


def test_large_model_path_defers_weights(tmp_path, monkeypatch):
    """Weights above DEFER_BYTES stay out of the proto through the checker and
    shape inference; an in-memory proto over the protobuf limit has them
    taken out the same way (the limit lowered here), and is left unchanged."""
    model = _dense_model()
    path = _save_external(model, tmp_path)
    m, _, deferred = onnx_external.read_model(path)
    assert set(deferred) == {"W"} and m.ByteSize() < 4096
    monkeypatch.setattr(onnx_external, "PROTO_LIMIT", 4096)
    before = model.SerializeToString()
    m, _, deferred = onnx_external.read_model(model)
    assert set(deferred) == {"W"} and m.ByteSize() < 4096
    compiled = kiln.compile(model)
    assert model.SerializeToString() == before
    _check(compiled, path, sizes=(3,))


def _external(tmp_path):
    path = _save_external(_dense_model(), tmp_path)
    return path, onnx.load(path, load_external_data=False)


def _relocate(path, model, location):
    for t in model.graph.initializer:
        if t.name == "W":
            for e in t.external_data:
                if e.key == "location":
                    e.value = location
    onnx.save_model(model, path)


@pytest.mark.parametrize("location", ["../model.onnx.data", "/etc/hostname", "sub/../../model.onnx.data"])
def test_external_location_leaving_the_directory(tmp_path, location):
    inner = tmp_path / "inner"
    inner.mkdir()
    path, model = _external(inner)
    (tmp_path / "model.onnx.data").write_bytes((inner / "model.onnx.data").read_bytes())
    _relocate(path, model, location)
    with pytest.raises(ParseError, match=rf"tensor 'W' .*'{location}'.*leaves the model's directory"):
        kiln.compile(path)


def test_external_symlink_out_of_the_directory(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    path, model = _external(inner)
    (tmp_path / "outside.data").write_bytes((inner / "model.onnx.data").read_bytes())
    os.symlink(tmp_path / "outside.data", inner / "link.data")
    _relocate(path, model, "link.data")
    with pytest.raises(ParseError, match=r"tensor 'W' .*'link.data', a link that leads out"):
        kiln.compile(path)


def test_external_data_missing_or_short(tmp_path):
    path, model = _external(tmp_path)
    data = tmp_path / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(ParseError, match=r"tensor '\w+' wants bytes .* 'model.onnx.data', which holds only 1000"):
        kiln.compile(path)
    data.unlink()
    with pytest.raises(ParseError, match=r"tensor '\w+' keeps its data in 'model.onnx.data', which is missing"):
        kiln.compile(path)


def test_in_memory_model_with_external_references(tmp_path):
    _, model = _external(tmp_path)
    with pytest.raises(ParseError, match=r"tensor '\w+' keeps its data in the external file 'model.onnx.data', "
                                         r"but the model was given in memory"):
        kiln.compile(model)
    with pytest.raises(ParseError, match="given in memory"):
        kiln.import_onnx(model.SerializeToString())


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    d = tmp_path_factory.mktemp("named")
    path = os.path.join(d, "named.onnx")
    onnx.save_model(_dense_model(), path)
    return path, kiln.compile(path)


def test_names_in_errors_and_signature(named):
    _, compiled = named
    x = _feeds(2)["x"]
    with pytest.raises(ShapeError, match=r"input 'x' has rank 3"):
        compiled(x=x[None], mask=x)
    with pytest.raises(ShapeError, match=r"input 'mask' axis 0 is 3 but"):
        compiled({"x": x, "mask": np.zeros((3, 160), np.float32)})
    with pytest.raises(ShapeError, match=r"missing input: 'mask' \[B, 160\] f32"):
        compiled(x=x)
    with pytest.raises(ShapeError, match=r"the model has no input 'masks' \(its inputs: 'x', 'mask'\)"):
        compiled(x=x, masks=x)
    with pytest.raises(ShapeError, match=r"input 'x' is given twice"):
        compiled(x, x=x)
    sig = compiled.signature()
    assert [i["name"] for i in sig["inputs"]] == ["x", "mask"] and sig["inputs"][0]["shape"] == ["B", 160]
    assert [o["name"] for o in sig["outputs"]] == ["y", "z"]
    assert compiled.report()["signature"] == sig
    assert compiled.shape_contract()["bound_from"]["B"]["input"] == "x"


def test_kiln_run_input_by_name(named, tmp_path, capsys):
    from kiln.tools.kiln_run import main

    path, compiled = named
    feeds = _feeds(4)
    np.save(tmp_path / "x.npy", feeds["x"])
    np.save(tmp_path / "mask.npy", feeds["mask"])
    assert main([path, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"mask={tmp_path / 'mask.npy'}",
                 "--repeat", "0", "--save", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "output0 'y': shape [4, 64, 2] f32" in out and "output1 'z': shape [] f32" in out
    want = _session(path).run(None, feeds)
    np.testing.assert_allclose(np.load(tmp_path / "out" / "output0.npy"), want[0], rtol=1e-4, atol=1e-4)
    with pytest.raises(KilnError, match=r"no input 'masks' \(inputs: x, mask\)"):
        main([path, "--input", "masks=4x160", "--repeat", "0"])


def test_artifact_keeps_names(named, tmp_path):
    path, compiled = named
    compiled.save(tmp_path / "art")
    loaded = kiln.load(tmp_path / "art")
    assert [s.name for s in loaded.inputs] == ["x", "mask"] and loaded.output_names == ["y", "z"]
    feeds = _feeds(6)
    got = loaded(feeds)
    want = _session(path).run(None, feeds)
    assert list(got) == ["y", "z"]
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-4)
    with pytest.raises(ShapeError, match=r"input 'mask' axis 0"):
        loaded(x=feeds["x"], mask=feeds["mask"][:2])


def test_unnamed_outputs_and_passthrough():
    """An input returned as it is keeps the output's own name; a dict call
    on one output gives a one-entry dict."""
    m = _model([h.make_node("Identity", ["a"], ["same"]), h.make_node("Neg", ["a"], ["neg"])],
               [h.make_tensor_value_info("a", T.FLOAT, ["N"])],
               [h.make_tensor_value_info("same", T.FLOAT, ["N"]), h.make_tensor_value_info("neg", T.FLOAT, ["N"])])
    compiled = kiln.compile(m)
    a = np.arange(5, dtype=np.float32)
    got = compiled({"a": a})
    assert list(got) == ["same", "neg"]
    np.testing.assert_array_equal(got["same"], a)
    np.testing.assert_array_equal(got["neg"], -a)


def test_torch_forward_parameter_names():
    import torch

    class Net(torch.nn.Module):
        def forward(self, tokens, scale):
            return tokens * scale + 1

    b = torch.export.Dim("B", min=1, max=64)
    compiled = kiln.compile(Net(), (torch.randn(3, 4), torch.randn(3, 4)), ({0: b}, {0: b}))
    assert [s.name for s in compiled.inputs] == ["tokens", "scale"]
    t, s = np.ones((2, 4), np.float32), np.full((2, 4), 2, np.float32)
    np.testing.assert_array_equal(compiled(scale=s, tokens=t), t * s + 1)
    np.testing.assert_array_equal(compiled({"tokens": t, "scale": s})["output0"], t * s + 1)
    with pytest.raises(ShapeError, match="input 'scale'"):
        compiled(tokens=t, scale=s[:, :2])


def test_string_types_are_unsupported():
    m = _model([h.make_node("StringNormalizer", ["text"], ["out"], case_change_action="LOWER")],
               [h.make_tensor_value_info("text", T.STRING, [2])], [h.make_tensor_value_info("out", T.STRING, [2])])
    with pytest.raises(UnsupportedError, match=r"graph input 'text' has dtype string"):
        kiln.compile(m)
    const = h.make_node("Constant", [], ["s"], value=h.make_tensor("sv", T.STRING, [2], [b"1.5", b"2"]))
    m = _model([const, h.make_node("Cast", ["s"], ["f"], to=T.FLOAT), h.make_node("Add", ["x", "f"], ["y"])],
               [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])])
    with pytest.raises(UnsupportedError, match=r"node 'Constant_0' \(Constant\) has attribute 'value' of type "
                                               r"tensor\(string\)"):
        kiln.compile(m)


def test_sequence_types_are_unsupported():
    seq = h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, [2]))
    m = _model([h.make_node("SequenceAt", ["seq", "i"], ["y"])],
               [h.make_value_info("seq", seq), h.make_tensor_value_info("i", T.INT64, [])],
               [h.make_tensor_value_info("y", T.FLOAT, [2])])
    with pytest.raises(UnsupportedError, match=r"graph input 'seq' has sequence type seq\(tensor\(float\)\)"):
        kiln.compile(m)
    m = _model([h.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
                h.make_node("SequenceAt", ["s", "i"], ["y"])],
               [h.make_tensor_value_info("x", T.FLOAT, [2, 3]), h.make_tensor_value_info("i", T.INT64, [])],
               [h.make_tensor_value_info("y", T.FLOAT, [3])])
    with pytest.raises(UnsupportedError, match=r"node 'SplitToSequence_0' \(SplitToSequence\) output 's' has "
                                               r"sequence type seq\(tensor\(float\)\)"):
        kiln.compile(m)
