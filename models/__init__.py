"""The numerics engine: NHWC layers with explicit backward passes, EfficientNet, ResNet and a dense net.

Imports numpy, numba and the ``jit`` package only.
"""

from models.kernels.threads import get_num_threads, set_num_threads
from models.efficientnet import EfficientNetConfig, block_specs
from models.io import load_state_dict_file, save_state_dict
from models.loss import softmax_cross_entropy
from models.model import Model
from models.param import Param
from models.profile import LayerProfile
from models.registry import build_model, efficientnet_config, model_config, param_count, resnet_config
from models.resnet import ResNetConfig

__all__ = [
    "EfficientNetConfig", "LayerProfile", "Model", "Param", "ResNetConfig", "block_specs", "build_model",
    "efficientnet_config", "get_num_threads", "load_state_dict_file", "model_config", "param_count",
    "resnet_config", "save_state_dict", "set_num_threads", "softmax_cross_entropy",
]
