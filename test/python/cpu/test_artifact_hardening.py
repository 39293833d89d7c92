"""An artifact's manifest and files are untrusted input (issue 35)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln.compiler import ARTIFACT_META, load, save

MLP = open(__file__.rsplit("/test/", 1)[0] + "/examples/mlp.mlir").read()


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    d = tmp_path_factory.mktemp("art") / "mlp.kiln"
    save(MLP, str(d))
    return d


def _with_ir(artifact, tmp_path, ir_name):
    d = tmp_path / "copy.kiln"
    d.mkdir()
    (d / "model.kiln.mlir").write_text((artifact / "model.kiln.mlir").read_text())
    meta = json.loads((artifact / ARTIFACT_META).read_text())
    meta["ir"] = ir_name
    (d / ARTIFACT_META).write_text(json.dumps(meta))
    return d


def test_a_saved_artifact_loads(artifact):
    model, reference = load(str(artifact)), kiln.compile(MLP)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal([3 if isinstance(d, str) or not str(d).isdigit() else int(str(d)) for d in i.dims],
                                dtype=np.float32) for i in model.inputs]
    np.testing.assert_allclose(model(*args), reference(*args), rtol=1e-6)


@pytest.mark.parametrize("name, message", [
    ("../outside.mlir", "lies outside the artifact directory"),
    ("/etc/hostname", "lies outside the artifact directory"),
    ("missing.mlir", "the artifact's IR file 'missing.mlir' is missing"),
    (None, "names no IR file"),
    (7, "names no IR file"),
])
def test_the_manifest_cannot_point_outside_the_artifact(artifact, tmp_path, name, message):
    (tmp_path / "outside.mlir").write_text(MLP)
    d = _with_ir(artifact, tmp_path, name)
    with pytest.raises(kiln.KilnError, match=message):
        load(str(d))


def test_a_link_out_of_the_artifact_is_refused(artifact, tmp_path):
    (tmp_path / "outside.mlir").write_text(MLP)
    d = _with_ir(artifact, tmp_path, "link.mlir")
    (d / "link.mlir").symlink_to(tmp_path / "outside.mlir")
    with pytest.raises(kiln.KilnError, match="lies outside the artifact directory"):
        load(str(d))


@pytest.mark.parametrize("manifest", ["[1, 2]", '"text"', "{broken"])
def test_a_malformed_manifest_is_a_kiln_error(artifact, tmp_path, manifest):
    d = _with_ir(artifact, tmp_path, "model.kiln.mlir")
    (d / ARTIFACT_META).write_text(manifest)
    with pytest.raises(kiln.KilnError, match="artifact"):
        load(str(d))


def test_a_mlir_file_that_is_not_utf8_is_a_parse_error(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_bytes(b"\xff\xfe\x00func.func @f() {\n return\n}\n")
    with pytest.raises(kiln.ParseError, match="cannot read"):
        kiln.compile(str(path))
