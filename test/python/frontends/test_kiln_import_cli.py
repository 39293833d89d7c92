"""kiln-import: ONNX and factory sources, --symbol, --report, --report-json, errors."""

import json
import os

import onnx

from kiln.tools.kiln_import import main

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def test_onnx_model_with_report(tmp_path, capsys):
    out, rep = tmp_path / "m.mlir", tmp_path / "r.json"
    assert main([os.path.join(LIGHT, "light_squeezenet.onnx"), "-o", str(out), "--report",
                 "--report-json", str(rep)]) == 0
    text = out.read_text()
    assert '"kiln.conv2d"' in text and "dense_resource<" in text and "torch." not in text.split("{-#")[0].replace(
        "torch.onnx_meta", "")
    err = capsys.readouterr().err
    assert "onnx.Conv" in err and "fallback rate: 0.0% of ops, 0.0% of FLOPs" in err
    data = json.loads(rep.read_text())
    assert data["totals"]["fallback"] == 0 and data["ops"]["onnx.Conv"]["converted"] == 26
    assert data["fallback_rate_ops"] == 0.0 and data["flops"]["converted"] > 1e8


def test_factory_with_symbols(capsys):
    assert main(["kiln.bench.models:tiny_mlp", "--elide-weights"]) == 0
    out = capsys.readouterr().out
    assert '"kiln.symbol"() {max = 64 : i64, min = 1 : i64, sym_name = "B"}' in out
    assert '!kiln.tensor<["B", 8], f32>' in out


def test_onnx_symbol_option(tmp_path, capsys):
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert main([str(path), "--symbol", "N=2:32"]) == 0
    assert 'max = 32 : i64, min = 2 : i64, sym_name = "N"' in capsys.readouterr().out
    assert main([str(path), "--symbol", "N=9:3"]) == 1
    assert "kiln-import: error: symbol 'N' has min 9 > max 3" in capsys.readouterr().err
    assert main([str(path), "--symbol", "N"]) == 1
    assert "--symbol expects NAME=MIN:MAX, got 'N'" in capsys.readouterr().err


def test_errors_are_one_line_messages(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12garbage")
    assert main([str(bad)]) == 1
    assert "kiln-import: error:" in capsys.readouterr().err
    assert main(["kiln.bench.models:no_such_factory"]) == 1
    assert "'kiln.bench.models' has no factory 'no_such_factory'" in capsys.readouterr().err
