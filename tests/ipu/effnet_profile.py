"""A hand-made EfficientNet LayerProfile list for tests that must not depend on ``models/``.

It follows the B0 block table and compound scaling in docs/sources.md §3, with Graphcore's G16 option
(groups = channels // group_dim, docs/sources.md §2). It counts; it does not compute.
"""

from __future__ import annotations

import math

from models.profile import ConvShape, LayerProfile

B0_BLOCKS = [  # repeats, kernel, stride, expand, in, out
    (1, 3, 1, 1, 32, 16), (2, 3, 2, 6, 16, 24), (2, 5, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112), (4, 5, 2, 6, 112, 192), (1, 3, 1, 6, 192, 320),
]
SCALING = {0: (1.0, 1.0, 224), 4: (1.4, 1.8, 380)}  # width, depth, resolution


def _round_filters(c: int, width: float) -> int:
    c *= width
    new = max(8, int(c + 4) // 8 * 8)
    return int(new + 8 if new < 0.9 * c else new)


def _conv(name, block, batch, hw, cin, cout, k, stride, groups, kind="conv"):
    out_hw = -(-hw // stride)
    macs = batch * out_hw**2 * cout * (cin // groups) * k * k
    geometry = ConvShape(batch, (hw, hw), cin, cout, (k, k), stride, groups)
    return LayerProfile(name, block, kind, 2 * macs, 4 * macs, cout * (cin // groups) * k * k,
                        batch * out_hw**2 * cout, batch * hw**2 * cin, True, (batch, hw, hw, cin), geometry), out_hw


def _vector(name, block, kind, batch, hw, c, flops_per_elem, params=0):
    elems = batch * hw**2 * c
    return LayerProfile(name, block, kind, flops_per_elem * elems, 2 * flops_per_elem * elems, params,
                        elems, elems, False, (batch, hw, hw, c))


def efficientnet_profile(variant: int = 4, batch: int = 1, group_dim: int = 1, expand: int | None = None,
                         image_size: int | None = None) -> list[LayerProfile]:
    width, depth, res = SCALING[variant]
    hw = image_size or res
    out: list[LayerProfile] = []
    c = _round_filters(32, width)
    layer, hw = _conv("stem.conv", "stem", batch, hw, 3, c, 3, 2, 1)
    out += [layer, _vector("stem.norm", "stem", "norm", batch, hw, c, 8, 2 * c),
            _vector("stem.act", "stem", "act", batch, hw, c, 4)]
    for stage, (r, k, s, e, cin, cout) in enumerate(B0_BLOCKS, start=1):
        cin, cout = _round_filters(cin, width), _round_filters(cout, width)
        for i in range(int(math.ceil(depth * r))):
            name = f"block{stage}{chr(ord('a') + i)}"
            stride = s if i == 0 else 1
            e_used = e if expand is None or e == 1 else expand
            out_hw = _block(out, name, batch, hw, cin, cout, k, stride, e_used, group_dim)
            hw, cin = out_hw, cout
    head = _round_filters(1280, width)
    layer, _ = _conv("head.conv", "head", batch, hw, cin, head, 1, 1, 1)
    out += [layer, _vector("head.norm", "head", "norm", batch, hw, head, 8, 2 * head),
            _vector("head.act", "head", "act", batch, hw, head, 4),
            LayerProfile("head.pool", "head", "pool", batch * hw * hw * head, batch * hw * hw * head, 0,
                         batch * head, 0, False, (batch, hw, hw, head)),
            LayerProfile("head.fc", "head", "dense", 2 * batch * head * 1000, 4 * batch * head * 1000,
                         head * 1000 + 1000, batch * 1000, batch * head, True, (batch, head),
                         ConvShape(batch, (1, 1), head, 1000)),
            _vector("head.loss", "head", "loss", batch, 1, 1000, 6)]
    return out


def _block(out, name, batch, hw, cin, cout, k, stride, expand, group_dim) -> int:
    mid = cin * expand
    if expand != 1:
        layer, _ = _conv(f"{name}.expand", name, batch, hw, cin, mid, 1, 1, 1)
        out += [layer, _vector(f"{name}.norm0", name, "norm", batch, hw, mid, 8, 2 * mid),
                _vector(f"{name}.act0", name, "act", batch, hw, mid, 4)]
    groups = max(mid // group_dim, 1)
    layer, out_hw = _conv(f"{name}.dw", name, batch, hw, mid, mid, k, stride, groups,
                          kind="dwconv" if groups == mid else "conv")
    sq = max(1, cin // 4)
    out += [layer, _vector(f"{name}.norm1", name, "norm", batch, out_hw, mid, 8, 2 * mid),
            _vector(f"{name}.act1", name, "act", batch, out_hw, mid, 4),
            LayerProfile(f"{name}.se", name, "se", 4 * batch * mid * sq + batch * out_hw**2 * mid * 2,
                         8 * batch * mid * sq + batch * out_hw**2 * mid * 4, 2 * mid * sq + mid + sq,
                         batch * out_hw**2 * mid, batch * out_hw**2 * mid, False, (batch, out_hw, out_hw, mid))]
    layer, _ = _conv(f"{name}.project", name, batch, out_hw, mid, cout, 1, 1, 1)
    out += [layer, _vector(f"{name}.norm2", name, "norm", batch, out_hw, cout, 8, 2 * cout)]
    if stride == 1 and cin == cout:
        out.append(_vector(f"{name}.add", name, "add", batch, out_hw, cout, 1))
    return out_hw
