"""Fixtures of the serving tests: a small MLP with a dynamic batch ``B`` and
sequence ``L``, saved as an artifact, and its PyTorch reference."""

import os

# Ray reads these when it is imported (the serving test imports it after
# this file): its node on 127.0.0.1 with every server bound to loopback
# (what Ray does on a laptop; on Linux it otherwise takes the routable
# address and listens on all interfaces), and no usage report.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# The router asks each replica its queue length before sending a request and
# gives up on a replica that does not answer within 0.1 s; on a loaded 2-core
# CI host a replica busy with a batch missed that deadline every time and all
# requests went to the other one (CI of 2026-12-06). Seconds, not 0.1 s: the
# test checks how requests are shared, not the router's latency.
os.environ.setdefault("RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S", "2")
os.environ.setdefault("RAY_SERVE_MAX_QUEUE_LENGTH_RESPONSE_DEADLINE_S", "5")

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

import kiln
from kiln.compiler import save

#: The artifact's profiles (B only; L ranges over 1..32); outside them the generic kernels run.
PROFILES = [{"B": (1, 4, 8)}, {"B": (9, 16, 24)}]
#: What loading it takes: nothing where the artifact keeps its profiles and policy
#: (kiln.load's format); the first format's loader compiles the IR again and takes them.
LOAD_OPTIONS = {} if hasattr(kiln, "load") else {"profiles": PROFILES, "policy": "generic"}


class MLP(nn.Module):
    """[B, L, 16] -> [B, L, 8]: rows are independent along B (and L)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.fc1(x)))


@pytest.fixture(scope="session")
def mlp():
    """The PyTorch MLP (seeded weights)."""
    torch.manual_seed(0)
    return MLP().eval()


@pytest.fixture(scope="session")
def mlp_artifact(mlp, tmp_path_factory):
    """The MLP compiled with PROFILES and saved (B in 1..64, L in 1..32)."""
    path = tmp_path_factory.mktemp("serve") / "mlp.kiln"
    save(mlp, str(path), (torch.randn(2, 3, 16),), ({0: Dim("B", min=1, max=64), 1: Dim("L", min=1, max=32)},),
         profiles=PROFILES, policy="generic")
    return path


@pytest.fixture(scope="session")
def reference(mlp):
    """What PyTorch computes for one request: ``reference(x)``."""

    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return mlp(torch.from_numpy(x)).numpy()

    return run
