"""A PyTorch EfficientNet with exactly torchvision's module structure and state_dict keys.

torchvision itself cannot be installed beside this torch, so this oracle re-states its
``efficientnet.py`` (MBConv, Conv2dNormActivation, SqueezeExcitation, StochasticDepth "row")
with knobs for the G16 and group-norm variants. Used by the tests and by ``bench/``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

SCALING = {  # width, depth, dropout
    "b0": (1.0, 1.0, 0.2), "b1": (1.0, 1.1, 0.2), "b2": (1.1, 1.2, 0.3), "b3": (1.2, 1.4, 0.3),
    "b4": (1.4, 1.8, 0.4), "b5": (1.6, 2.2, 0.4), "b6": (1.8, 2.6, 0.5), "b7": (2.0, 3.1, 0.5),
    "tiny": (0.25, 0.25, 0.2),
}
STAGES = [  # expand, kernel, stride, in, out, layers (torchvision's bneck_conf for B0)
    (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1),
]


def make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def norm_factory(kind="batch", eps=1e-3, momentum=0.01, groups=4):
    if kind == "batch":
        return lambda c: nn.BatchNorm2d(c, eps=eps, momentum=momentum)

    def group_norm(c):
        g = min(c, groups)
        while c % g:
            g -= 1
        return nn.GroupNorm(g, c, eps=eps)

    return group_norm


def randomise_running_stats(model: nn.Module) -> None:
    """Non-trivial batch-norm running statistics, as in a trained model."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)


class Conv2dNormActivation(nn.Sequential):
    def __init__(self, cin, cout, kernel, stride=1, groups=1, norm=None, act=True):
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False), norm(cout)]
        if act:
            layers.append(nn.SiLU(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels, squeeze):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.SiLU(inplace=True)
        self.scale_activation = nn.Sigmoid()

    def forward(self, x):
        s = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return s * x


def stochastic_depth(x, p, training):
    if not training or p == 0.0:
        return x
    survival = 1.0 - p
    noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype, device=x.device).bernoulli_(survival)
    return x * noise.div_(survival)


class MBConv(nn.Module):
    def __init__(self, expand, kernel, stride, cin, cout, sd_prob, norm, group_size):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        expanded = make_divisible(cin * expand)
        layers = []
        if expanded != cin:
            layers.append(Conv2dNormActivation(cin, expanded, 1, norm=norm))
        groups = expanded if group_size == 1 else max(expanded // group_size, 1)
        while expanded % groups:  # B6-G16's 56 channels: 2 groups, not 3 (docs/models.md)
            groups -= 1
        layers.append(Conv2dNormActivation(expanded, expanded, kernel, stride, groups, norm))
        layers.append(SqueezeExcitation(expanded, max(1, cin // 4)))
        layers.append(Conv2dNormActivation(expanded, cout, 1, norm=norm, act=False))
        self.block = nn.Sequential(*layers)
        self.sd_prob = sd_prob

    def forward(self, x):
        result = self.block(x)
        if self.use_res_connect:
            result = stochastic_depth(result, self.sd_prob, self.training) + x
        return result


class EfficientNetRef(nn.Module):
    def __init__(self, variant="b0", num_classes=1000, norm=None, group_size=1, expand_ratio=None,
                 dropout=None, drop_connect=0.2, in_channels=3, depth=None):
        super().__init__()
        width, default_depth, default_dropout = SCALING[variant]
        depth = default_depth if depth is None else depth
        norm = norm or norm_factory()
        stages = []
        for e, k, s, cin, cout, n in STAGES:
            e = expand_ratio if (expand_ratio is not None and e != 1) else e
            stages.append((e, k, s, make_divisible(cin * width), make_divisible(cout * width),
                           int(math.ceil(n * depth))))
        layers = [Conv2dNormActivation(in_channels, stages[0][3], 3, 2, norm=norm)]
        total, index = sum(st[5] for st in stages), 0
        for e, k, s, cin, cout, n in stages:
            stage = []
            for j in range(n):
                stage.append(MBConv(e, k, s if j == 0 else 1, cin if j == 0 else cout, cout,
                                    drop_connect * index / total, norm, group_size))
                index += 1
            layers.append(nn.Sequential(*stage))
        last = 4 * stages[-1][4]
        layers.append(Conv2dNormActivation(stages[-1][4], last, 1, norm=norm))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        p = default_dropout if dropout is None else dropout
        self.classifier = nn.Sequential(nn.Dropout(p, inplace=True), nn.Linear(last, num_classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))
