"""What the zoo tests share: importing torchvision's registry wheel, and the
one check every zoo model goes through (issue 43).

The check is what a user does: export with named dynamic dims, compile once
with fallbacks allowed, assert that none happened, and compare with eager at
the smallest, a middle and the largest value of every symbol.
"""

import torch

import kiln
from kiln.bench.torchvision_compat import define_torchvision_schemas

# max |kiln - eager| / max |eager| for fp32 models (the bar).
RTOL = 1e-4


def import_torchvision():
    """``torchvision`` from the registry's wheel (see ``kiln.bench.torchvision_compat``)."""
    define_torchvision_schemas()
    import torchvision

    return torchvision


def check_model(module, example, dynamic_shapes, shapes, *, rtol=RTOL, name=None, make_inputs=None):
    """Compile ``module`` once and compare it with eager at every entry of ``shapes``.

    ``example`` is the tuple of example inputs for ``torch.export``;
    ``dynamic_shapes`` the usual ``torch.export`` spec with named ``Dim``s;
    ``shapes`` a list of input tuples, or of keys passed to ``make_inputs``
    (a callable returning the input tuple for a key), covering min, middle and
    max of every symbol.  Asserts 0 fallbacks and returns the compiled model.
    """
    module = module.eval()
    compiled = kiln.compile(module, example, dynamic_shapes=dynamic_shapes)
    fallback = compiled.report()["fallback"]
    assert fallback["ops"] == 0, (name, fallback)
    for key in shapes:
        inputs = make_inputs(key) if make_inputs is not None else key
        with torch.inference_mode():
            want = module(*inputs)
        # An all-zero reference (a zero-initialised head) would let any result pass.
        assert float(want.abs().max()) > 0, (name, key, "eager's output is all zeros: nothing is compared")
        got = compiled(*inputs)
        got_t = torch.as_tensor(got)
        assert tuple(got_t.shape) == tuple(want.shape), (name, key, got_t.shape, want.shape)
        err = float((got_t - want).abs().max() / want.abs().max().clamp_min(1e-30))
        assert err <= rtol, (name, key, err)
    return compiled
