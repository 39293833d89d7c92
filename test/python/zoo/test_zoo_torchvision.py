"""Zoo test, torchvision part (issue 43): the models people bring, built the
way a user builds them (torchvision's own constructors, random weights, a
small ``num_classes``), compiled once and compared with eager at the smallest,
a middle and the largest value of every symbol, with 0 fallbacks.

Small configurations keep CI time in check (every kernel is LLVM-compiled):
each family is built from its class with fewer/narrower blocks but the same
block types as the standard models (inverted residuals with squeeze-excite,
grouped convolutions, channel shuffle, dense concatenation, shifted windows,
grid/block attention).  The standard sizes run under the ``slow`` marker.

Dynamic dims: every model takes a dynamic batch ``B``.  The CNNs end in an
adaptive average pool, so they also take dynamic ``H`` and ``W`` (checked at
odd sizes too, where strided convolutions floor; H, W >= 33: at 32 torch.export
guards on a 1 x 1 final feature map).  ViT and MaxViT assert their
constructor's ``image_size`` / ``input_size``, and torch.export itself rejects
Swin with a dynamic H / W ("Expected an equality constraint for s0": its
shifted-window mask is built per size), so those three take ``B`` only.

Outputs are made meaningful first: BatchNorm statistics are calibrated with a
few train-mode forwards on random data (fresh ones are mean 0 / var 1, which
makes every BatchNorm an identity), ViT's zero-initialised head gets a random
init (else every output is 0 and any result "matches"), and ConvNeXt's layer
scale starts at 0.5 instead of 1e-6 (else each block is the identity).
"""

import pytest
import torch
from torch.export import Dim
from zoo_common import check_model, import_torchvision

tv = import_torchvision()
M = tv.models

NUM_CLASSES = 10


def _calibrated(model, image=(32, 32), steps=3):
    """``model`` with BatchNorm running statistics from random batches, in eval mode."""
    torch.manual_seed(0)
    model.train()
    with torch.no_grad():
        for _ in range(steps):
            model(torch.randn(4, 3, *image))
    return model.eval()


# --- small configurations (CI) -------------------------------------------------


def resnet():
    return M.ResNet(M.resnet.BasicBlock, [1, 1, 1, 1], num_classes=NUM_CLASSES)


def mobilenet_v2():
    # t, c, n, s: a stride-1 repeat gives the residual connection.
    setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 1, 2]]
    return M.MobileNetV2(num_classes=NUM_CLASSES, width_mult=0.5, inverted_residual_setting=setting)


def mobilenet_v3():
    cfg = M.mobilenetv3.InvertedResidualConfig
    setting = [
        cfg(16, 3, 16, 16, True, "RE", 2, 1, 1.0),     # squeeze-excite, ReLU
        cfg(16, 3, 72, 24, False, "RE", 2, 1, 1.0),
        cfg(24, 5, 96, 24, True, "HS", 1, 1, 1.0),     # hardswish, residual
    ]
    return M.MobileNetV3(setting, last_channel=64, num_classes=NUM_CLASSES)


def efficientnet():
    cfg = M.efficientnet.MBConvConfig
    setting = [cfg(1, 3, 1, 32, 16, 1), cfg(6, 3, 2, 16, 24, 2)]
    return M.EfficientNet(setting, dropout=0.2, num_classes=NUM_CLASSES, last_channel=64)


def regnet():
    # RegNetY-style: grouped bottlenecks with squeeze-excite.
    params = M.regnet.BlockParams.from_init_params(depth=3, w_0=16, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25)
    return M.RegNet(params, num_classes=NUM_CLASSES, stem_width=16)


def densenet():
    return M.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, bn_size=2, num_classes=NUM_CLASSES)


def shufflenet():
    # Two units in the first stage: the second one splits, shuffles channels.
    return M.ShuffleNetV2([2, 1, 1], [8, 16, 32, 64, 128], num_classes=NUM_CLASSES)


def convnext():
    cfg = M.convnext.CNBlockConfig
    return M.ConvNeXt([cfg(16, 32, 1), cfg(32, None, 1)], layer_scale=0.5, num_classes=NUM_CLASSES)


def swin():
    # Two blocks in the first stage: the second one shifts its windows (masked attention).
    return M.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 1], num_heads=[2, 2], window_size=[2, 2],
                             stochastic_depth_prob=0.0, num_classes=NUM_CLASSES)


def vit():
    model = M.VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=32, mlp_dim=64,
                                num_classes=NUM_CLASSES)
    torch.nn.init.normal_(model.heads.head.weight, std=0.2)
    torch.nn.init.normal_(model.heads.head.bias, std=0.2)
    return model


def maxvit():
    return M.MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16], block_layers=[1],
                    head_dim=8, stochastic_depth_prob=0.0, num_classes=NUM_CLASSES)


# name -> (builder, (H, W) of the fixed-size models, or None: dynamic H and W)
SMALL = {
    "resnet": (resnet, None),
    "mobilenet_v2": (mobilenet_v2, None),
    "mobilenet_v3": (mobilenet_v3, None),
    "efficientnet": (efficientnet, None),
    "regnet": (regnet, None),
    "densenet": (densenet, None),
    "shufflenet": (shufflenet, None),
    "convnext": (convnext, None),
    "vit": (vit, (32, 32)),
    "maxvit": (maxvit, (32, 32)),
    "swin": (swin, (32, 32)),
}

# Known failures: name -> the exact reason (strict: an unexpected pass fails the run).
XFAIL = {}

B = (1, 8)
HW = (33, 64)


def _run(model, fixed, b_range=B, hw_range=HW):
    """Export with B (and H, W unless ``fixed``) dynamic; compare at min, middle and max."""
    b_lo, b_hi = b_range
    batch = Dim("B", min=b_lo, max=b_hi)
    if fixed is None:
        lo, hi = hw_range
        spec = ({0: batch, 2: Dim("H", min=lo, max=hi), 3: Dim("W", min=lo, max=hi)},)
        example = torch.randn(2, 3, lo + 8, lo + 16)
        # Odd middle sizes: strided convolutions and pools floor there.
        shapes = [(b_lo, lo, lo), ((b_lo + b_hi) // 2 + 1, (lo + hi) // 2 - 1, (lo + hi) // 2 + 3), (b_hi, hi, hi)]
        image = (lo, lo)
    else:
        spec = ({0: batch},)
        example = torch.randn(2, 3, *fixed)
        shapes = [(b, *fixed) for b in (b_lo, (b_lo + b_hi) // 2 + 1, b_hi)]
        image = fixed
    model = _calibrated(model, image)
    gen = torch.Generator().manual_seed(1)
    return check_model(model, (example,), spec, shapes, name=type(model).__name__,
                       make_inputs=lambda s: (torch.randn(*s[:1], 3, *s[1:], generator=gen),))


def _param(name):
    marks = [pytest.mark.xfail(reason=XFAIL[name], strict=True)] if name in XFAIL else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_param(n) for n in SMALL])
def test_torchvision_small(name):
    build, fixed = SMALL[name]
    _run(build(), fixed)


# --- the standard sizes (slow) -------------------------------------------------------

STANDARD = {
    "resnet18": (lambda: M.resnet18(num_classes=NUM_CLASSES), None),
    "mobilenet_v3_small": (lambda: M.mobilenet_v3_small(num_classes=NUM_CLASSES), None),
    "efficientnet_b0": (lambda: M.efficientnet_b0(num_classes=NUM_CLASSES), None),
    "shufflenet_v2_x0_5": (lambda: M.shufflenet_v2_x0_5(num_classes=NUM_CLASSES), None),
    "swin_t": (lambda: M.swin_t(num_classes=NUM_CLASSES), (224, 224)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(STANDARD))
def test_torchvision_standard(name):
    build, fixed = STANDARD[name]
    _run(build(), fixed, b_range=(1, 4), hw_range=(64, 96))
