"""An artifact's manifest and files are untrusted input (issues 35, 41)."""

from __future__ import annotations

import json
import shutil

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


def _copy(artifact, tmp_path, edit=None):
    """A copy of the artifact, its manifest changed by ``edit(manifest)``."""
    d = tmp_path / "copy.kiln"
    shutil.copytree(artifact, d)
    if edit is not None:
        meta = json.loads((d / ARTIFACT_META).read_text())
        edit(meta)
        (d / ARTIFACT_META).write_text(json.dumps(meta))
    return d


def _args(model, rng):
    return [rng.standard_normal([3 if not str(d).isdigit() else int(str(d)) for d in i.dims], dtype=np.float32)
            for i in model.inputs]


def test_a_saved_artifact_loads(artifact):
    model, reference = load(str(artifact)), kiln.compile(MLP)
    args = _args(model, np.random.default_rng(0))
    np.testing.assert_allclose(model(*args), reference(*args), rtol=1e-6)


def _set_weights(name):
    def edit(meta):
        meta["weights"] = name
    return edit


def _set_library(name):
    def edit(meta):
        meta["libraries"]["generic"]["file"] = name
    return edit


@pytest.mark.parametrize("edit, message", [
    (_set_weights("../outside.safetensors"), "lies outside the artifact directory"),
    (_set_weights("/etc/hostname"), "lies outside the artifact directory"),
    (_set_weights("missing.safetensors"), "the artifact's weights file 'missing.safetensors' is missing"),
    (_set_weights(None), "names no weights file"),
    (_set_weights(7), "names no weights file"),
    (_set_library("../outside.safetensors"), "lies outside the artifact directory"),
    (_set_library("kernels/none.so"), "the artifact's kernel library 'kernels/none.so' is missing"),
])
def test_the_manifest_cannot_point_outside_the_artifact(artifact, tmp_path, edit, message):
    (tmp_path / "outside.safetensors").write_bytes((artifact / "weights.safetensors").read_bytes())
    d = _copy(artifact, tmp_path, edit)
    with pytest.raises(kiln.KilnError, match=message):
        load(str(d))


def test_a_link_out_of_the_artifact_is_refused(artifact, tmp_path):
    (tmp_path / "outside.safetensors").write_bytes((artifact / "weights.safetensors").read_bytes())
    d = _copy(artifact, tmp_path, _set_weights("link.safetensors"))
    (d / "link.safetensors").symlink_to(tmp_path / "outside.safetensors")
    with pytest.raises(kiln.KilnError, match="lies outside the artifact directory"):
        load(str(d))


def test_a_file_without_a_digest_is_refused(artifact, tmp_path):
    def edit(meta):
        del meta["files"]["kernels/generic.so"]
    d = _copy(artifact, tmp_path, edit)
    with pytest.raises(kiln.KilnError, match="has no digest for the kernel library 'kernels/generic.so'"):
        load(str(d))


@pytest.mark.parametrize("manifest", ["[1, 2]", '"text"', "{broken"])
def test_a_malformed_manifest_is_a_kiln_error(artifact, tmp_path, manifest):
    d = _copy(artifact, tmp_path)
    (d / ARTIFACT_META).write_text(manifest)
    with pytest.raises(kiln.KilnError, match="artifact"):
        load(str(d))


def test_a_manifest_with_wrong_entries_is_a_kiln_error(artifact, tmp_path):
    def edit(meta):
        meta["schedule"]["values"] = "nope"
    with pytest.raises(kiln.KilnError, match="malformed kiln-artifact.json"):
        load(str(_copy(artifact, tmp_path, edit)))


def test_an_unknown_format_is_named(artifact, tmp_path):
    def edit(meta):
        meta["format"] = "kiln-artifact/99"
    with pytest.raises(kiln.KilnError, match="unknown artifact format 'kiln-artifact/99'"):
        load(str(_copy(artifact, tmp_path, edit)))


# The previous format (kiln IR, compiled again on load) still loads, with the same checks.


def _legacy(tmp_path, ir_name):
    d = tmp_path / "legacy.kiln"
    d.mkdir()
    (d / "model.kiln.mlir").write_text(MLP)
    (d / ARTIFACT_META).write_text(json.dumps({"format": "kiln-artifact/1", "device": "cpu", "ir": ir_name}))
    return d


def test_a_legacy_artifact_is_compiled_again(tmp_path):
    model, reference = kiln.load(str(_legacy(tmp_path, "model.kiln.mlir"))), kiln.compile(MLP)
    args = _args(model, np.random.default_rng(1))
    np.testing.assert_allclose(model(*args), reference(*args), rtol=1e-6)


@pytest.mark.parametrize("name, message", [
    ("../outside.mlir", "lies outside the artifact directory"),
    ("/etc/hostname", "lies outside the artifact directory"),
    ("missing.mlir", "the artifact's IR file 'missing.mlir' is missing"),
    (None, "names no IR file"),
    (7, "names no IR file"),
])
def test_a_legacy_manifest_cannot_point_outside_the_artifact(tmp_path, name, message):
    (tmp_path / "outside.mlir").write_text(MLP)
    with pytest.raises(kiln.KilnError, match=message):
        load(str(_legacy(tmp_path, name)))


def test_a_mlir_file_that_is_not_utf8_is_a_parse_error(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_bytes(b"\xff\xfe\x00func.func @f() {\n return\n}\n")
    with pytest.raises(kiln.ParseError, match="cannot read"):
        kiln.compile(str(path))
