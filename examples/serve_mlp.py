"""Serve a kiln artifact on Ray Serve: two replicas, requests at mixed shapes.

    pip install -e '.[serve]'
    python examples/serve_mlp.py                      # a Ray cluster of this machine alone
    python examples/serve_mlp.py --address auto       # the cluster `ray start` made here

An MLP with a dynamic batch ``B`` and sequence ``L`` is compiled and saved
as an artifact; :func:`kiln.serve.deployment` serves it with ``--replicas``
replicas, each loading the artifact once; ``--requests`` concurrent requests
of random shapes go through the deployment handle, and each answer is
checked against PyTorch.  Across machines the artifact directory must be
at the same path on every node (a shared file system, or copied there).
"""

import argparse
import os
import tempfile
import time

import numpy as np
import torch
from torch import nn
from torch.export import Dim

import kiln.serve
from kiln.compiler import save


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="local", help="Ray cluster: 'local' starts one here; 'auto' joins one")
    parser.add_argument("--artifact", help="where to save the artifact (default: a temporary directory)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="kiln threads (and Ray CPUs) per replica")
    args = parser.parse_args()

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16)).eval()
    path = args.artifact or os.path.join(tempfile.mkdtemp(prefix="kiln-serve-"), "mlp.kiln")
    save(model, path, (torch.randn(2, 3, 16),), ({0: Dim("B", min=1, max=64), 1: Dim("L", min=1, max=64)},),
         profiles=[{"B": (1, 4, 16)}, {"B": (17, 32, 64)}], policy="generic")
    print(f"saved {path}")

    ray.init(address=args.address, include_dashboard=False)
    try:
        start = time.perf_counter()
        app = kiln.serve.deployment(path, num_replicas=args.replicas, threads=args.threads)
        handle = serve.run(app, name="kiln-mlp", route_prefix=None)
        print(f"{args.replicas} replicas ready in {time.perf_counter() - start:.1f} s")

        rng = np.random.default_rng(0)
        xs = [rng.standard_normal((int(rng.integers(1, 40)), int(rng.choice([1, 8, 64])), 16), dtype=np.float32)
              for _ in range(args.requests)]
        start = time.perf_counter()
        responses = [handle.remote(x) for x in xs]
        ys = [r.result(timeout_s=120) for r in responses]
        seconds = time.perf_counter() - start
        with torch.no_grad():
            err = max(float(np.abs(y - model(torch.from_numpy(x)).numpy()).max()) for x, y in zip(xs, ys))
        print(f"{len(xs)} requests in {seconds:.2f} s, max |kiln - torch| = {err:.2e}")
        assert err < 1e-4
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
