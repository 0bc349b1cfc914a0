"""EfficientNet builder: scaling arithmetic, names, parameter counts, blocks and overrides."""

from __future__ import annotations

import numpy as np
import pytest

from models import block_specs, build_model, efficientnet_config, param_count
from models.conv_norm import NormSpec
from models.efficientnet import group_count, round_channels, round_repeats
from models.layer import Rng
from models.mbconv import MBConv

# torchvision's documented counts (B0, B4) and the torchvision-layout reference for the rest.
TORCHVISION_PARAMS = {"b0": 5_288_548, "b1": 7_794_184, "b2": 9_109_994, "b3": 12_233_232,
                      "b4": 19_341_616, "b5": 30_389_784, "b6": 43_040_704, "b7": 66_347_960}


def test_channel_and_depth_rounding():
    assert [round_channels(c * 1.4) for c in (32, 16, 24, 40, 80, 112, 192, 320)] == [
        48, 24, 32, 56, 112, 160, 272, 448]
    assert round_channels(4.0) == 8 and round_channels(11.9) == 16 and round_channels(35.2) == 32
    assert [round_repeats(r, 1.8) for r in (1, 2, 2, 3, 3, 4, 1)] == [2, 4, 4, 6, 6, 8, 2]
    assert round_repeats(3, 3.1) == 10


@pytest.mark.parametrize("variant", sorted(TORCHVISION_PARAMS))
def test_parameter_counts_equal_torchvision(variant):
    assert param_count(efficientnet_config(f"efficientnet-{variant}")) == TORCHVISION_PARAMS[variant]


def test_built_model_matches_counted_parameters_and_b4_block_table():
    model = build_model("efficientnet-b0")
    assert sum(p.data.size for p in model.params()) == 5_288_548
    specs = block_specs(efficientnet_config("efficientnet-b4"))
    assert len(specs) == 32
    assert [s.name for s in specs][:6] == ["block1a", "block1b", "block2a", "block2b", "block2c", "block2d"]
    assert specs[-1].cout == 448 and efficientnet_config("efficientnet-b4").head_channels == 1792
    assert efficientnet_config("efficientnet-b4").stem_channels == 48
    drop = [s.drop_prob for s in specs]
    assert drop[0] == 0.0 and drop[1] == pytest.approx(0.2 / 32) and drop[-1] == pytest.approx(0.2 * 31 / 32)


def test_g16_variant_uses_groups_of_16_and_expansion_4():
    cfg = efficientnet_config("efficientnet-b4-g16-gn")
    assert cfg.group_size == 16 and cfg.expand_ratio == 4 and cfg.norm.kind == "group" and cfg.norm.groups == 4
    specs = block_specs(cfg)
    s = specs[2]  # block2a: 24 -> 96 expanded, 6 groups of 16
    assert (s.cin, s.expanded, s.groups, s.squeeze) == (24, 96, 6, 6)
    assert specs[0].expanded == specs[0].cin == 48  # expansion 1 blocks keep width
    assert param_count(cfg) == 19_328_168
    assert param_count(efficientnet_config("efficientnet-b0-g16")) == 5_913_796


# G16 counts with groups = max(C // 16, 1), lowered to a divisor of C (only B6's block1a: 3 -> 2)
G16_PARAMS = {"b0": 5_913_796, "b1": 8_332_120, "b2": 9_504_122, "b3": 12_590_896, "b4": 19_328_168,
              "b5": 28_715_320, "b6": 39_830_504, "b7": 59_210_264}


def test_g16_group_rule_for_channels_not_a_multiple_of_16():
    assert [group_count(c, 16) for c in (96, 56, 40, 24, 16, 8)] == [6, 2, 2, 1, 1, 1]
    assert group_count(56, 1) == 56  # depthwise
    for variant in G16_PARAMS:
        for s in block_specs(efficientnet_config(f"efficientnet-{variant}-g16")):
            assert s.expanded % s.groups == 0 and (s.groups == 1 or s.expanded // s.groups >= 16), (variant, s)
    b6 = block_specs(efficientnet_config("efficientnet-b6-g16"))[0]
    assert (b6.name, b6.expanded, b6.groups) == ("block1a", 56, 2)
    block = MBConv(b6, NormSpec(), "symmetric", Rng(), np.float32, np.random.default_rng(0))  # used to fail
    conv = 56 * 28 * 3 * 3 + 2 * 56
    se = 2 * 56 * b6.squeeze + b6.squeeze + 56
    assert sum(p.data.size for p in block.params()) == conv + se + 56 * b6.cout + 2 * b6.cout


@pytest.mark.parametrize("variant", sorted(G16_PARAMS))
def test_g16_parameter_counts(variant):
    assert param_count(efficientnet_config(f"efficientnet-{variant}-g16")) == G16_PARAMS[variant]
    assert param_count(efficientnet_config(f"efficientnet-{variant}-g16-gn")) == G16_PARAMS[variant]


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(G16_PARAMS))
def test_every_g16_variant_builds_with_its_counted_parameters(variant):
    model = build_model(f"efficientnet-{variant}-g16")  # B7: 59 M parameters, about 0.5 GB with gradients
    assert sum(p.data.size for p in model.params()) == G16_PARAMS[variant]


def test_names_overrides_and_errors():
    tiny = build_model("efficientnet-tiny", num_classes=7, resolution=40, in_channels=1, norm="group",
                       groups=2, epsilon=1e-5, drop_connect=0.1, dropout=0.0)
    assert tiny.blocks() == ["stem", "block1a", "block2a", "block3a", "block4a", "block5a", "block6a", "block7a",
                             "head"]
    assert tiny.config.norm.eps == 1e-5 and tiny.input_shape == (40, 40, 1)
    assert tiny.state_dict()["classifier.1.weight"].shape == (7, 320)
    assert "features.0.1.running_mean" not in tiny.buffers()
    assert build_model("efficientnet-b0", bn_momentum=0.1).buffers()["features.0.1.running_var"].shape == (32,)
    with pytest.raises(ValueError, match="efficientnet-b9"):
        build_model("efficientnet-b9")
    with pytest.raises(ValueError, match="unknown overrides"):
        build_model("efficientnet-tiny", widht=2.0)
    with pytest.raises(ValueError, match="suffix"):
        build_model("efficientnet-b0-g8")


def test_state_dict_has_torchvision_keys_and_shapes():
    sd = build_model("efficientnet-b0").state_dict()
    assert sd["features.0.0.weight"].shape == (32, 3, 3, 3)
    assert sd["features.1.0.block.0.0.weight"].shape == (32, 1, 3, 3)
    assert sd["features.1.0.block.1.fc1.weight"].shape == (8, 32, 1, 1)
    assert sd["features.2.0.block.0.0.weight"].shape == (96, 16, 1, 1)
    assert sd["features.8.0.weight"].shape == (1280, 320, 1, 1)
    assert sd["features.0.1.num_batches_tracked"].dtype == np.int64
    assert sd["classifier.1.weight"].shape == (1000, 1280)
    assert len(sd) == 360  # 213 parameters + 49 batch norms x 3 buffers
