"""Group norm as exporters write it, back to one ``GroupNormalization`` node.

torch's exporters (opsets below 21, and the TorchScript one at every opset) write ``nn.GroupNorm(G, C)``
as ``Reshape(x -> [N, G, -1])``, ``InstanceNormalization`` with a constant scale of ones and offset of
zeros, ``Reshape`` back to x's shape, then ``Mul`` by the weight and ``Add`` of the bias (both
``[C, 1, 1]``). :func:`fuse_group_norm` turns each such chain, whose intermediate tensors are read once,
into ``GroupNormalization(x, weight, bias; num_groups=G, epsilon)`` with the weight and bias as ``[C]``
constants, so that a group norm is one norm row with C + C parameters (not the G ones and G zeros).
"""

from __future__ import annotations

import numpy as np

from models.onnx.ir import Node


def fuse_group_norm(nodes: list[Node], consts: dict[str, np.ndarray], graph_outputs) -> list[Node]:
    readers: dict[str, int] = {}
    for n in nodes:
        for t in n.inputs:
            readers[t] = readers.get(t, 0) + 1
    by_input: dict[str, list[Node]] = {}
    for n in nodes:
        for t in n.inputs[:1]:
            by_input.setdefault(t, []).append(n)

    def only_reader(t: str, op: str) -> Node | None:
        found = by_input.get(t, [])
        if readers.get(t) != 1 or t in graph_outputs or len(found) != 1 or found[0].op != op:
            return None
        return found[0]

    replace, drop = {}, set()
    for r1 in nodes:
        if r1.op != "Reshape" or len(r1.input_shapes[0]) != 4 or len(r1.output_shapes[0]) != 3:
            continue
        x, (n, c, h, w) = r1.inputs[0], r1.input_shapes[0]
        groups = r1.output_shapes[0][1]
        inorm = only_reader(r1.outputs[0], "InstanceNormalization")
        r2 = inorm and only_reader(inorm.outputs[0], "Reshape")
        mul = r2 and r2.output_shapes[0] == (n, c, h, w) and only_reader(r2.outputs[0], "Mul")
        add = mul and only_reader(mul.outputs[0], "Add")
        if not add or r1.output_shapes[0][0] != n:
            continue
        scale, offset = (consts.get(t) for t in inorm.inputs[1:3])
        weight, bias = consts.get(mul.inputs[1]), consts.get(add.inputs[1])
        if scale is None or offset is None or not (np.all(scale == 1) and np.all(offset == 0)):
            continue
        if any(v is None or v.size != c or readers.get(t) != 1
               for v, t in ((weight, mul.inputs[1]), (bias, add.inputs[1]))):
            continue
        shapes = (tuple(weight.shape), tuple(bias.shape))  # type: ignore[union-attr]
        consts[mul.inputs[1]], consts[add.inputs[1]] = weight.reshape(c), bias.reshape(c)  # type: ignore[union-attr]
        replace[id(r1)] = Node("GroupNormalization", inorm.name, (x, mul.inputs[1], add.inputs[1]), add.outputs,
                               ((n, c, h, w), (c,), (c,)), add.output_shapes,
                               {"num_groups": int(groups), "epsilon": float(inorm.attrs.get("epsilon", 1e-5)),
                                "initializer_shapes": shapes})  # the graph's own shapes, for writing it back
        drop.update(id(m) for m in (inorm, r2, mul, add))
    return [replace.get(id(m), m) for m in nodes if id(m) not in drop]
