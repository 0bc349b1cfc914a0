"""The ONNX export of a built-in EfficientNet: ``torch_efficientnet_ref`` at the built-in's width and depth,
with the built-in's initial weights, exported for training (``onnx_exports.training_export``)."""

from __future__ import annotations

import numpy as np

from models import build_model
from tests.models.onnx_exports import training_export

# the default job's network (launch/train/configs.yml: default) on the shipped 28 x 28 x 1, 10-class images
DEFAULT_OPTIONS = {"norm": "group", "dropout": 0.1, "drop_connect": 0.1}


def builtin_efficientnet(depth: float | None = None, **options):
    """The built-in efficientnet-tiny of the default job (``depth``: its depth coefficient, 0.25 unless given)."""
    extra = {} if depth is None else {"depth": depth}
    return build_model("efficientnet-tiny", 10, seed=0, in_channels=1, resolution=28,
                       **{**DEFAULT_OPTIONS, **options, **extra})


def export_builtin(builtin, depth: float | None = None) -> bytes:
    """The ONNX bytes of ``builtin`` (from ``builtin_efficientnet``) as torch writes the same network."""
    import torch

    from tests.models.torch_efficientnet_ref import EfficientNetRef, norm_factory

    c = builtin.config
    ref = EfficientNetRef("tiny", c.num_classes, norm=norm_factory(c.norm.kind, eps=c.norm.eps), dropout=c.dropout,
                          drop_connect=c.drop_connect, in_channels=c.in_channels, depth=depth)
    missing, unexpected = ref.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in builtin.state_dict().items()},
                                              strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    torch.manual_seed(0)
    return training_export(ref, torch.randn(2, c.in_channels, 28, 28), input_name="images", output_name="logits",
                           dynamic={0: "batch"})
