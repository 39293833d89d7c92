"""Every kiln subpackage is listed in pyproject.toml, so a wheel install has it all."""

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_every_subpackage_is_packaged():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"kiln"}
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts and rel.parts[0] in (".venv", "test", "build") or "Output" in rel.parts:
            continue
        if rel.parts:
            found.add("kiln." + ".".join(rel.parts))
    assert found == listed
