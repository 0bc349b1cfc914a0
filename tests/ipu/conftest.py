import pytest

from tests.ipu.effnet_profile import efficientnet_profile
from tests.ipu.toy_profiles import toy_layer


@pytest.fixture(scope="session")
def b4_g16():
    """EfficientNet-B4 G16 (expand 4) at 380 px, micro-batch 3: the G16-B4 recipe's replica."""
    return efficientnet_profile(4, batch=3, group_dim=16, expand=4)


@pytest.fixture(scope="session")
def b4_g1():
    return efficientnet_profile(4, batch=3, group_dim=1, expand=None)


@pytest.fixture
def toy_profile():
    """Four blocks of known cost: stem (2 layers), b1, b2, head."""
    return [
        toy_layer("s.0", "stem", flops=10, params=1, act=8, saved=5),
        toy_layer("s.1", "stem", flops=20, params=2, act=8, saved=6, matmul=False, kind="act"),
        toy_layer("b1.0", "block1a", flops=40, params=3, act=10, saved=7),
        toy_layer("b2.0", "block2a", flops=30, params=4, act=10, saved=8),
        toy_layer("h.0", "head", flops=10, params=5, act=1, saved=9),
    ]


@pytest.fixture(scope="session")
def resnet50_profile():
    """ResNet-50 at 224 px, micro-batch 20: the ResNet recipes' replica (every resnet50 preset)."""
    from ipu.plan import PRESETS, load_profile

    return load_profile(PRESETS["resnet50-pod16"])
