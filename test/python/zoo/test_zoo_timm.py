"""timm's model families through kiln, as a user would bring them (issue 43).

Random weights, small configurations of each family (fewer blocks, narrower
channels, small images where the model allows) so that the file stays
within its CI budget; the architecture-defining parts (attention-bias
tables, tiered stems, GroupNorm, token mixing, ...) are the family's own.
BatchNorm statistics are calibrated by a few train-mode forwards first, so
eval-mode BatchNorm is not the identity.  Each model is exported with a
dynamic batch ``B`` (and dynamic ``H`` / ``W`` where the model allows),
compiled once, and compared with eager at the min, a middle and the max of
every symbol with 0 fallbacks (``zoo_common.check_model``).

Which dims are dynamic:
- B only: EfficientFormer, LeViT (attention-bias tables are sized by the
  token grid), MLP-Mixer (token MLPs are sized by the token count),
  MobileViTv2, PoolFormer (torch.export guards on GroupNorm's reshape),
  ResNet-T, RegNetX, TF-EfficientNet (guards on the rounding of strided
  stages or of "same" padding), DeiT (position embeddings sized by the
  token grid);
- B, H and W (H = W): ConvMixer.
"""

import functools

import pytest
import torch
from torch.export import Dim
from zoo_common import check_model, import_torchvision


@functools.cache
def _timm():
    import_torchvision()  # timm imports torchvision, whose wheel needs the schemas first
    import timm

    return timm


def _efficientformer():
    # l1 layout (4 stages, a meta-4D tail, one attention block last), 1 block per stage.
    return _timm().create_model("efficientformer_l1", num_classes=10, depths=(1, 1, 1, 2), embed_dims=(16, 24, 32, 48))


def _levit():
    return _timm().create_model(
        "levit_128s", num_classes=10, img_size=64, embed_dim=(32, 48, 64), num_heads=(2, 3, 4), depth=(1, 1, 1)
    )


def _mobilevitv2():
    return _timm().create_model("mobilevitv2_050", num_classes=10)


def _resnet10t():
    # ResNet-T: deep tiered stem and average-pool downsampling (ResNet-D family).
    return _timm().create_model("resnet10t", num_classes=10)


def _convmixer():
    _timm()
    from timm.models.convmixer import ConvMixer

    return ConvMixer(dim=32, depth=2, kernel_size=5, patch_size=4, num_classes=10)


def _mixer():
    _timm()
    from timm.models.mlp_mixer import MlpMixer

    return MlpMixer(num_classes=10, img_size=64, patch_size=16, num_blocks=2, embed_dim=32)


def _poolformer():
    # poolformer_s12's blocks (GroupNorm1, pooling token mixer, layer scale), fewer and narrower.
    _timm()
    from timm.models.metaformer import GroupNorm1, MetaFormer, Pooling

    return MetaFormer(
        depths=(1, 1, 1, 1), dims=(16, 24, 32, 48), token_mixers=Pooling, norm_layers=GroupNorm1,
        downsample_norm=None, mlp_act=torch.nn.GELU, mlp_bias=True, layer_scale_init_values=1e-5,
        res_scale_init_values=None, use_mlp_head=False, num_classes=10,
    )


B = dict(min=1, mid=3, max=8)

def _deit():
    # DeiT's distillation token and two heads (averaged in eval).
    return _timm().create_model(
        "deit_tiny_distilled_patch16_224", num_classes=10, img_size=64, depth=2, embed_dim=48, num_heads=3
    )


def _tf_efficientnet():
    # TF-ported EfficientNet: "same" padding computed from the input size (Conv2dSame), SE, SiLU.
    _timm()
    from timm.models._efficientnet_builder import BN_EPS_TF_DEFAULT
    from timm.models.efficientnet import _gen_efficientnet

    return _gen_efficientnet(
        "tf_efficientnet_b0", channel_multiplier=0.5, depth_multiplier=0.34, num_classes=10,
        bn_eps=BN_EPS_TF_DEFAULT, pad_type="same",
    )


def _regnet():
    return _timm().create_model("regnetx_002", num_classes=10)


#: name -> (factory, static image size) or (factory, (lo, mid, hi)): dynamic
#: H = W over lo..hi.  torch.export rejects a range of H for models whose
#: guards on the rounding of strided stages it cannot prove over the range
#: (ResNet-T's ceil-mode average-pool downsampling, RegNetX, TF-EfficientNet's
#: "same" padding) or on
#: GroupNorm's reshape (PoolFormer, MobileViTv2).
MODELS = {
    "efficientformer_l1": (_efficientformer, 224),
    "levit_128s": (_levit, 64),
    "mobilevitv2_050": (_mobilevitv2, 64),
    "resnet10t": (_resnet10t, 64),
    "regnetx_002": (_regnet, 64),
    "convmixer": (_convmixer, (12, 37, 64)),
    "mixer": (_mixer, 64),
    "poolformer": (_poolformer, 64),
    "deit_tiny_distilled": (_deit, 64),
    "tf_efficientnet_b0": (_tf_efficientnet, 64),
}


def _calibrated(model, size):
    """``model`` in eval mode after a few train-mode forwards (BatchNorm statistics).

    Parameters timm initializes to a constant (zero classifier heads: the
    MLP-Mixer's output would be all zeros and the comparison could not fail;
    1e-5 layer scales that make blocks nearly the identity; unit norm
    weights) get noise first, so every layer shows in the output."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 3, size, size, generator=gen))
    model = model.eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, size, size, generator=gen))
    assert float(out.std()) > 1e-3, "the model's output is (nearly) constant: the comparison could not fail"
    return model


#: The biggest compiles (over a minute each on a loaded 2-core machine) run
#: in CI's full run only.
SLOW = {"levit_128s", "mobilevitv2_050", "tf_efficientnet_b0"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(MODELS)]
)
def test_timm_model_matches_eager(name):
    factory, size = MODELS[name]
    torch.manual_seed(0)
    model = factory()
    if isinstance(size, tuple):
        hw = Dim("H", min=size[0], max=size[2])
        dynamic = ({0: Dim("B", min=B["min"], max=B["max"]), 2: hw, 3: hw},)
        sizes = size
    else:
        dynamic = ({0: Dim("B", min=B["min"], max=B["max"])},)
        sizes = (size, size, size)
    model = _calibrated(model, sizes[1])
    gen = torch.Generator().manual_seed(2)
    shapes = [
        (torch.randn(b, 3, s, s, generator=gen),) for b, s in zip((B["min"], B["mid"], B["max"]), sizes)
    ]
    check_model(model, (torch.randn(2, 3, sizes[1], sizes[1]),), dynamic, shapes, name=name)
