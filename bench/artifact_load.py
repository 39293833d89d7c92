"""How long ``kiln.load`` of a saved model takes in a fresh process (issue 41).

    python -m kiln.bench.artifact_load                 # the bench MLP, 5 fresh processes
    python -m kiln.bench.artifact_load --workload transformer_block --runs 3 --json out.json

Compiles the workload (``kiln.bench.models``), saves it with ``kiln.save``,
then starts ``--runs`` fresh interpreters, each with torch-mlir made
unimportable (no compiler can run), that import numpy, torch and kiln (timed
apart: any PyTorch process pays for them), time ``kiln.load`` and the first
call, and check the output against the compiled model's.  Prints the times
(min / median) and the compile time for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

__all__ = ["main", "measure"]

_CHILD = '''
import json, sys, time
class _HideCompiler:
    def find_spec(self, name, path=None, target=None):
        if name == "torch_mlir" or name.startswith("torch_mlir."):
            raise ImportError(name + " is hidden: the load must not need it")
sys.meta_path.insert(0, _HideCompiler())
t0 = time.perf_counter()
import numpy as np
import torch
import kiln
t1 = time.perf_counter()
model = kiln.load(sys.argv[1])
t2 = time.perf_counter()
x = np.load(sys.argv[2])
out = model(x)
t3 = time.perf_counter()
print(json.dumps({"imports_s": t1 - t0, "load_s": t2 - t1, "first_call_s": t3 - t2,
                  "max_abs_diff": float(np.abs(out - np.load(sys.argv[3])).max()),
                  "compilations": model.compilations}))
'''


def measure(workload: str = "mlp", runs: int = 5, directory: str | None = None) -> dict:
    """Compile and save ``workload``, then time its load in ``runs`` fresh processes."""
    import torch

    import kiln
    from kiln.bench import models

    module, example, dynamic = getattr(models, workload)()
    start = time.perf_counter()
    compiled = kiln.compile(module, example, dynamic_shapes=dynamic)
    compile_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="kiln-artifact-bench-") as tmp:
        path = directory or os.path.join(tmp, f"{workload}.kiln")
        start = time.perf_counter()
        manifest = kiln.save(compiled, path)
        save_s = time.perf_counter() - start
        x = np.ascontiguousarray(example[0].detach().numpy() if isinstance(example[0], torch.Tensor) else example[0])
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "y.npy"), compiled(x))
        rows = []
        for _ in range(runs):
            r = subprocess.run([sys.executable, "-c", _CHILD, path, os.path.join(tmp, "x.npy"),
                                os.path.join(tmp, "y.npy")], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise RuntimeError(f"the load process failed:\n{r.stderr[-2000:]}")
            rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
        size = sum(f["size"] for f in manifest["files"].values())
    out = {"workload": workload, "compile_s": compile_s, "save_s": save_s, "artifact_bytes": size, "runs": rows}
    for key in ("imports_s", "load_s", "first_call_s"):
        values = [r[key] for r in rows]
        out[key] = {"min": min(values), "median": statistics.median(values)}
    return out


def main(argv=None) -> int:
    """Run the measurement and print it (``--json PATH`` also writes it)."""
    p = argparse.ArgumentParser(prog="python -m kiln.bench.artifact_load", description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="mlp", help="a kiln.bench.models factory (default mlp)")
    p.add_argument("--runs", type=int, default=5, help="fresh processes (default 5)")
    p.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = p.parse_args(argv)
    out = measure(args.workload, max(1, args.runs))
    ms = {k: out[k] for k in ("imports_s", "load_s", "first_call_s")}
    print(f"{args.workload}: compiled in {out['compile_s']:.2f} s, saved in {out['save_s']:.2f} s "
          f"({out['artifact_bytes'] / 2**20:.1f} MiB)")
    for key, v in ms.items():
        print(f"  {key[:-2]:<11} min {v['min'] * 1e3:8.1f} ms   median {v['median'] * 1e3:8.1f} ms")
    worst = max(r["max_abs_diff"] for r in out["runs"])
    print(f"  outputs: max abs diff {worst:g}; compilations in the loading processes: "
          f"{sorted({r['compilations'] for r in out['runs']})}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
