"""The ops of an ONNX graph that ``models.onnx`` reads: one row each, the one table every list of them comes from.

Each :class:`OpRule` says how the profile counts the op (its ``family``: one rule of ``profile.py`` per
family, :data:`PROFILE_RULES`), which of the engine's layers or graph ops trains it (``layer``; empty for
an op that only ``poprun-ipu predict --onnx`` costs, which training refuses before it starts) and what
training (or the reader) accepts of it (``limits``). ``cost_as`` is what the cost model counts an
activation or a norm as (``profile.cost_workload``); ``pattern`` says how the importer finds an op that is
no single ONNX node (SiLU, torch's stochastic depth) or also finds as several. The importer's supported
list (``graph.SUPPORTED_OPS``), its error message, the trainer's dispatch and error message
(``network.py``), the profile's dispatch, the workload and the op table of ``docs/onnx.md``
(:func:`markdown_table`, checked by ``tests/models/test_onnx_op_table.py``) are all read from here.
Plain data: imports nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpRule:
    op: str  # the ONNX op type, or the importer's name for a pattern (SiLU, DropPath)
    family: str  # the profile rule (a key of PROFILE_RULES)
    layer: str = ""  # the engine's layer (or graph op) that trains it; "": prediction only
    limits: str = ""  # what training (or the reader) takes of it
    cost_as: str = ""  # activations: relu or swish; norms: batch or group (the cost model's workload)
    pattern: str = ""  # how the importer finds it when it is no single ONNX node (or also as several)

    @property
    def onnx(self) -> bool:
        """An ONNX op type (not a name the importer gives a pattern)."""
        return self.op not in ("SiLU", "DropPath")

    @property
    def trainable(self) -> bool:
        return bool(self.layer)


# family -> what its profile row is (profile._Rows has one rule per family)
PROFILE_RULES = {
    "conv": "`conv` (`dwconv` when groups = in = out channels), with its convolution shape",
    "dense": "`dense` (no geometry for a product of two computed tensors)",
    "norm": "`norm`",
    "activation": "`act` (keeps nothing after a norm or residual add that only it reads)",
    "binary": "`add` for a residual (two computed inputs of the output's shape), else `eltwise`",
    "pool": "`pool`, k*k FLOPs per output",
    "global_pool": "`pool` (global)",
    "dropout": "`dropout`",
    "drop_path": "`eltwise`, one factor per sample kept",
    "softmax": "`softmax`",
    "einsum": "`dense` without geometry, a multiply-add per combination of its letters' values",
    "concat": "`concat` (a copy)",
    "movement": "none (data movement)",
    "elementwise": "`eltwise`, its input kept",
}

RULES: tuple[OpRule, ...] = (
    OpRule("Conv", "conv", "Conv2d", "2-D, grouped or depthwise, dilated (on the im2col path)"),
    OpRule("Gemm", "dense", "Dense", "a constant weight; no transA, alpha = beta = 1"),
    OpRule("MatMul", "dense", "MatMul", "a constant weight on [N, features] is a `Dense`; else numpy's matmul of "
           "two computed tensors or one and a constant weight, batch dimensions broadcast; of two constants, the "
           "first is fixed (a buffer: Swin-V2's coordinates table) and the second a weight"),
    OpRule("Einsum", "einsum", "Einsum", "any number of operands (computed, or constant weights), explicit or "
           "implicit output, `...`; no letter twice in one operand (diagonals, traces), no size-1 axis broadcast "
           "against a longer one"),
    OpRule("BatchNormalization", "norm", "BatchNorm2d", "batch statistics when training, running statistics kept",
           cost_as="batch"),
    OpRule("GroupNormalization", "norm", "GroupNorm", cost_as="group",
           pattern="also torch's Reshape, InstanceNormalization, Reshape, Mul, Add"),
    OpRule("InstanceNormalization", "norm", "GroupNorm", "an image batch; a group per channel", cost_as="group"),
    OpRule("LayerNormalization", "norm", "LayerNorm", "any axis but the batch's; scale (and bias) initializers",
           cost_as="group", pattern="also Transpose(0, 2, 3, 1), LayerNormalization of the last "
           "axis, Transpose(0, 3, 1, 2) (torch's channels-last LayerNorm2d) as one norm of the NHWC channels"),
    OpRule("Relu", "activation", "Activation", cost_as="relu"),
    OpRule("Clip", "activation", "Unary", cost_as="relu"),
    OpRule("Sigmoid", "activation", "Activation", cost_as="swish"),
    OpRule("SiLU", "activation", "Activation", cost_as="swish", pattern="Mul(x, Sigmoid(x))"),
    OpRule("HardSigmoid", "activation", "Unary", cost_as="swish"),
    OpRule("HardSwish", "activation", "Unary", cost_as="swish", pattern="also Mul(x, HardSigmoid(x; 1/6, 1/2))"),
    OpRule("Tanh", "activation", "Unary", cost_as="swish"),
    OpRule("Exp", "activation", "Unary", cost_as="swish"),
    OpRule("Gelu", "activation", "Unary", "exact (erf) or approximate=\"tanh\"", cost_as="swish"),
    OpRule("Add", "binary", "Binary"),
    OpRule("Sub", "binary", "Binary"),
    OpRule("Mul", "binary", "Binary"),
    OpRule("Div", "binary", "Binary"),
    OpRule("Concat", "concat", "Concat"),
    OpRule("MaxPool", "pool", "MaxPool2d", "any kernel, strides and pads (at most half the kernel), floor or ceil "
           "mode; no dilation"),
    OpRule("AveragePool", "pool", "AvgPool2d", "any kernel, strides and pads (at most half the kernel), floor or "
           "ceil mode, count_include_pad 0 or 1; no dilation; over the whole image: `GlobalAvgPool`"),
    OpRule("GlobalAveragePool", "global_pool", "GlobalAvgPool"),
    OpRule("ReduceMean", "global_pool", "ReduceMean", "any axes but the batch's, keepdims 0 or 1; over H and W of "
           "an image batch the engine's `GlobalAvgPool`"),
    OpRule("ReduceSum", "global_pool", "ReduceSum", "any axes but the batch's, keepdims 0 or 1 (MobileViT-V2's "
           "linear attention)"),
    OpRule("ReduceL2", "global_pool", "ReduceL2", "any axes but the batch's, keepdims 0 or 1 (torch's normalize)"),
    OpRule("Softmax", "softmax", "Softmax", "any axis"),
    OpRule("Dropout", "dropout", "Dropout"),
    OpRule("DropPath", "drop_path", "DropPath", pattern="torch's stochastic depth (RandomUniformLike, Less, Cast, Div, Mul)"),
    OpRule("Flatten", "movement", "Move"),
    OpRule("Reshape", "movement", "Move", "the batch on any axis, alone or folded with another axis (attention's "
           "heads, or windows), never split over two; a shape that holds the traced batch follows the actual one"),
    OpRule("Transpose", "movement", "Move", "any permutation (the batch's axis followed)"),
    OpRule("Squeeze", "movement", "Move"),
    OpRule("Unsqueeze", "movement", "Move"),
    OpRule("Identity", "movement", "Move"),
    OpRule("Slice", "movement", "Slice", "of a computed tensor: constant starts, ends, axes and steps; the batch "
           "whole"),
    OpRule("Gather", "movement", "Gather", "of a computed tensor or a parameter (Swin's relative position bias "
           "table): constant indices, on any axis but the batch's"),
    OpRule("Split", "movement", "Split", "any axis but the batch's (one `Slice` per output)"),
    OpRule("ScatterND", "movement", "ScatterND", "of a tensor without the batch (Swin-V2's qkv bias, a parameter): "
           "constant indices and updates, reduction none"),
    OpRule("Pad", "movement", "Pad", "constant mode, constant pads (none negative, none on the batch's axis)"),
    OpRule("Expand", "movement", "Expand", "a constant shape; of a parameter (ViT's class token): broadcast to the "
           "actual batch on the one axis broadcast to the traced batch, its gradient summed"),
    OpRule("Tile", "movement", "Expand", "constant repeats; of a parameter: tiled to the actual batch as Expand"),
    OpRule("Pow", "elementwise", "Power", "a constant scalar exponent"),
    OpRule("Sqrt", "elementwise", "Power"),
    OpRule("Reciprocal", "elementwise", "Power"),
)
OPS: dict[str, OpRule] = {r.op: r for r in RULES}

# Movement ops that keep their input's values in another shape: a weight the exporter reads through them (a
# group norm's Unsqueeze) is still the file's initializer (graph.py folds them; export.py writes back through them)
RESHAPES = ("Identity", "Unsqueeze", "Squeeze", "Reshape")
# ONNX ops read only as part of torch's stochastic depth (``patterns.fuse_drop_path``), or folded as constants
DROP_PATH_PARTS = ("RandomUniformLike", "Less", "Cast")
# How the batch goes through an op (``batch_axes.py``): reshapes keep it where the traced shapes put it; the engine's
# per-sample layers take it on axis 0; these layers keep it on its axis (element-wise ops, and the ops that index,
# norm or reduce other axes, which batch_axes checks)
BATCH_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
REDUCTIONS = ("ReduceMean", "ReduceSum", "ReduceL2")  # over attribute axes, keepdims 0 or 1
SAMPLE_LAYERS = ("Conv2d", "Dense", "BatchNorm2d", "GroupNorm", "MaxPool2d", "AvgPool2d", "GlobalAvgPool")
SAME_BATCH_LAYERS = ("Activation", "Unary", "Dropout", "Power", "Move", "Slice", "Split", "Pad", "Softmax", "LayerNorm",
                     "DropPath", "ReduceMean", "ReduceL2", "ReduceSum")


# What makes an ONNX op that nothing here reads work (an export option), for the error that names it
EXPORT_FIXES = {
    "Erf": "torch writes exact GELU as Div, Erf, Add, Mul below opset 20: export with opset_version=20 or later "
           "to write it as one Gelu node",
}
# What makes an imported graph train when an attribute stops it (network.py's blockers)
CEIL_MODE_FIX = ("onnx's shape inference counts a last window that starts in the padding, torch does not: build the "
                 "pooling with ceil_mode=False, or for an image size where the two agree")
EVAL_EXPORT_FIX = ("this looks like an eval-mode export (batch norm folded into the convolutions, equal folded "
                   "weights stored once): re-export in training mode, torch.onnx.export(model.train(), ..., "
                   "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)")


def ops_of(family: str) -> frozenset[str]:
    """The ops (ONNX types and pattern names) of one profile family."""
    return frozenset(r.op for r in RULES if r.family == family)


def cost_as(kind: str) -> frozenset[str]:
    """The ops the cost model counts as ``kind`` (relu, swish, batch, group)."""
    return frozenset(r.op for r in RULES if r.cost_as == kind)


ONNX_OPS = frozenset(r.op for r in RULES if r.onnx)  # the node types that become layers or profile rows
NORM_OPS = ops_of("norm")
ACTIVATIONS = ops_of("activation")
DATA_MOVEMENT = ops_of("movement")
WEIGHTED_OPS = ops_of("conv") | {"Gemm"} | NORM_OPS  # their inputs 1 and 2 are weights (ir.param_inputs)


def patterns_text() -> str:
    """The ops the importer reads from several nodes, in words (the importer's error message)."""
    return "; ".join(f"{r.op} as {r.pattern}" for r in RULES if r.pattern and not r.onnx)


def trainable_text() -> str:
    """What the graph model trains, in words (the trainer's error message)."""
    return ", ".join(r.op + (f" ({r.limits})" if r.limits else "") for r in RULES if r.trainable)


def markdown_table() -> str:
    """The op table of ``docs/onnx.md``."""
    lines = ["| op | profile row | trains as | notes |", "| --- | --- | --- | --- |"]
    for r in RULES:
        notes = "; ".join(x for x in (r.limits, r.pattern) if x)
        lines.append(f"| {r.op} | {PROFILE_RULES[r.family]} | {f'`{r.layer}`' if r.layer else 'prediction only'} | "
                     f"{notes} |")
    return "\n".join(lines)
