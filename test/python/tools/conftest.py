"""Fixtures of the tool tests: the small models of ``_tool_models``, written once per module."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _tool_models as tm  # noqa: E402


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    folder = tmp_path_factory.mktemp("factories")
    return folder, tm.write_factories(folder)


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    return tm.write_onnx(tmp_path_factory.mktemp("onnx") / "small.onnx")
