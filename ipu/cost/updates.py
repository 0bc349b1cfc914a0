"""Work done per weight tensor: gradient accumulation each micro-batch, the optimizer each update.

Every parameter tensor is its own set of popops calls (as TensorFlow's IPU optimizers and
gradient accumulation build them: one op per variable), so each pays its compute sets' syncs.

* Gradient accumulation: one add of the weight gradient into the accumulator per micro-batch.
* LARS (You et al. 2017; docs/sources.md §10): ||w|| and ||g|| (two reductions with FP32 accumulation),
  the trust ratio (a few scalar ops), ``g + beta w``, the momentum update and ``w - v``;
  tensors in LARS's skip list (norm scales and offsets, biases) get momentum SGD only.
* Momentum SGD: ``v = m v + lr g``, ``w - v``. RMSprop: the mean square (2 passes), its
  inverse square root, the momentum and the update. Every optimizer first scales the summed
  gradient by 1 / (loss scale x gradient accumulation), and resets the accumulator.
* 16.16 keeps weights and optimizer state in float16: the update is computed in float32 and
  each of the two stored tensors (weights, momentum) is cast back with stochastic rounding
  (one cast pass each; assumed, since the hardware rounds in the conversion instruction).
  16.32 keeps float32 masters and casts the new weights to float16 for the next step.

The host round trip per device-iteration call (``Assumptions.host_call_s``) is an assumption: no
public figure gives it; 50 us stands for one engine run call over PCIe/RoCE and the sync with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipu.cost.bsp import Cycles
from ipu.cost.layers import DeviceContext
from ipu.cost.vectors import VectorOp
from models.profile import LayerProfile


@dataclass(frozen=True)
class WeightTensor:
    """One parameter tensor as the per-tensor update ops see it (its own popops calls)."""

    name: str
    elems: int
    skip_lars: bool  # norm scale/offset or bias: no trust ratio, no weight decay


def weight_tensors(layers: list[LayerProfile]) -> list[WeightTensor]:
    """The parameter tensors of ``layers`` (what ``LayerProfile.params`` lumps per layer)."""
    out: list[WeightTensor] = []
    for layer in layers:
        p = layer.params
        if p <= 0:
            continue
        c = layer.in_shape[-1] if layer.in_shape else 0
        if layer.kind == "norm":
            out += [WeightTensor(f"{layer.name}.weight", p // 2, True),
                    WeightTensor(f"{layer.name}.bias", p - p // 2, True)]
        elif layer.kind == "se" and c:
            s = max(1, (p - c) // (2 * c + 1))
            out += [WeightTensor(f"{layer.name}.fc1.weight", c * s, False),
                    WeightTensor(f"{layer.name}.fc1.bias", s, True),
                    WeightTensor(f"{layer.name}.fc2.weight", s * c, False),
                    WeightTensor(f"{layer.name}.fc2.bias", c, True)]
        elif layer.conv is not None and p > layer.conv.in_channels * layer.conv.out_channels * layer.conv.kernel[0] \
                * layer.conv.kernel[1] // layer.conv.groups:
            bias = layer.conv.out_channels
            out += [WeightTensor(f"{layer.name}.weight", p - bias, False),
                    WeightTensor(f"{layer.name}.bias", bias, True)]
        else:
            out.append(WeightTensor(f"{layer.name}.weight", p, False))
    return out


def accumulate(tensors: list[WeightTensor], ctx: DeviceContext, accumulator_half: bool) -> Cycles:
    """Adding one micro-batch's weight gradients into the accumulators."""
    return sum((ctx.elementwise(VectorOp("binary", t.elems, accumulator_half)) for t in tensors), Cycles())


def optimizer_step(tensors: list[WeightTensor], ctx: DeviceContext, optimizer: str,
                   precision: str) -> dict[str, Cycles]:
    """Per-update optimizer work on one IPU, by part: norms, arithmetic, stores."""
    parts = {"lars_norms": Cycles(), "update": Cycles(), "stores": Cycles()}
    store_half = precision == "16.16"
    for t in tensors:
        def passes(count: int, op: str = "binary") -> Cycles:
            return ctx.run([VectorOp(op, t.elems, store_half)] * count)

        parts["update"] += passes(2)  # scale the gradient sum, reset the accumulator
        if optimizer == "lars" and not t.skip_lars:
            norm = ctx.reduction(t.elems, 1, 1, store_half)
            parts["lars_norms"] += norm + norm + ctx.scalar_ops(ctx.assumptions.trust_ratio_scalar_sets)
            parts["update"] += passes(2, "scaled_add") + passes(1)
        elif optimizer in ("lars", "momentum", "sgd"):
            parts["update"] += passes(1, "scaled_add") + passes(1)
        elif optimizer == "rmsprop":
            parts["update"] += passes(2) + passes(1, "rsqrt") + passes(2, "scaled_add") + passes(1)
        else:  # adam: two moments, bias corrections, the step
            parts["update"] += passes(4) + passes(1, "sqrt") + passes(1, "divide") + passes(1, "scaled_add")
        if store_half:
            parts["stores"] += passes(2, "cast")  # weights and momentum, stochastically rounded
        elif precision == "16.32":
            parts["stores"] += passes(1, "cast")  # float32 masters to the float16 compute copy
    return parts
