# ruff: noqa: F821  (lit injects `config` and `lit_config`)
"""lit configuration for kiln's FileCheck suite.

Runs with pip's ``lit`` and ``filecheck``: ``lit test/`` from the repository
root, with ``kiln-opt`` on PATH (the virtualenv's bin directory).
"""

import os
import shutil

import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")

config.environment["PATH"] = os.environ.get("PATH", "")
for key in ("PYTHONPATH", "HOME", "TMPDIR", "KILN_CACHE_DIR"):
    if key in os.environ:
        config.environment[key] = os.environ[key]

filecheck = shutil.which("FileCheck") or shutil.which("filecheck")
if filecheck is None:
    lit_config.fatal("FileCheck not found: pip install filecheck")
config.substitutions.append(("FileCheck", filecheck))
if shutil.which("kiln-opt") is None:
    lit_config.fatal("kiln-opt not found on PATH: install kiln (pip install -e .)")
