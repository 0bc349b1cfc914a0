"""A PyTorch ResNet with exactly torchvision's module structure and state_dict keys (v1.5).

torchvision cannot be installed beside this torch, so this oracle re-states the structure of
its ``resnet.py`` (BasicBlock, Bottleneck with the stride on the 3x3 conv, ``downsample``
as a 1x1 conv + norm, ``conv1``/``bn1``/``relu``/``maxpool``/``layer1..4``/``avgpool``/``fc``)
in plain ``torch.nn``, with knobs for the stem width and the norm. Used by the tests.
"""

from __future__ import annotations

from torch import nn

from tests.models.torch_efficientnet_ref import norm_factory

LAYOUTS = {  # name: (blocks per stage, bottleneck)
    "resnet18": ((2, 2, 2, 2), False), "resnet34": ((3, 4, 6, 3), False), "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True), "resnet152": ((3, 8, 36, 3), True),
}


def batch_norm(c):
    return nn.BatchNorm2d(c)


def group_norm(groups=32, eps=1e-5):
    return norm_factory("group", eps=eps, groups=groups)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride, downsample, norm):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = norm(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = norm(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride, downsample, norm):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = norm(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)  # v1.5: stride here
        self.bn2 = norm(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = norm(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNetRef(nn.Module):
    def __init__(self, layout="resnet50", num_classes=1000, width=64, norm=batch_norm, in_channels=3, layers=None):
        super().__init__()
        default_layers, bottleneck = LAYOUTS[layout]
        block = Bottleneck if bottleneck else BasicBlock
        self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        self.bn1 = norm(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = width
        for stage, blocks in enumerate(layers or default_layers):
            planes, stride = width * 2**stage, 1 if stage == 0 else 2
            stage_blocks = []
            for j in range(blocks):
                s = stride if j == 0 else 1
                downsample = None
                if s != 1 or cin != planes * block.expansion:
                    downsample = nn.Sequential(nn.Conv2d(cin, planes * block.expansion, 1, s, bias=False),
                                               norm(planes * block.expansion))
                stage_blocks.append(block(cin, planes, s, downsample, norm))
                cin = planes * block.expansion
            setattr(self, f"layer{stage + 1}", nn.Sequential(*stage_blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))
