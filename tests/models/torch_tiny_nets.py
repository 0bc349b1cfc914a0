"""Small PyTorch networks in the shapes of the families the ONNX importer meets: ResNet-18-style
(``TinyResNet``), MobileNet-V2-style (``TinyMobileNet``) and EfficientNet-B0-style with G16 groups and group
norm (``TinyEfficientNetG16``); exported for training by ``onnx_exports.training_export``. Needs torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class TinyResNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.conv = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class TinyMobileNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6()),
            InvertedResidual(8, 8, 1, 2), InvertedResidual(8, 12, 2, 3), InvertedResidual(12, 12, 1, 2))
        self.classifier = nn.Linear(12, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c, s):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, s, 1), nn.Conv2d(s, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.fc2(nn.functional.silu(self.fc1(nn.functional.adaptive_avg_pool2d(x, 1)))))


class TinyEfficientNetG16(nn.Module):
    """A B0-style stem and one MBConv block with a G16 grouped 3x3 conv, group norm, SiLU, SE, residual."""

    def __init__(self, classes=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.GroupNorm(4, 32), nn.SiLU())
        self.expand = nn.Sequential(nn.Conv2d(32, 64, 1, bias=False), nn.GroupNorm(4, 64), nn.SiLU())
        self.grouped = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1, groups=4, bias=False), nn.GroupNorm(4, 64), nn.SiLU())
        self.se = SqueezeExcite(64, 8)
        self.project = nn.Sequential(nn.Conv2d(64, 32, 1, bias=False), nn.GroupNorm(4, 32))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(self.se(self.grouped(self.expand(x))))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class TwoConvs(nn.Module):
    """Two bias-free convs of the same width with fresh batch norms: folded in eval mode, their biases are equal."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
        self.c2, self.b2 = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))
        return self.fc(x.mean((2, 3)))
