"""Runs of nodes that the importer's users treat as one layer, found on the ``Graph``'s nodes (no kernels).

``squeeze_excite_chains``: torchvision's ``SqueezeExcitation`` as exporters write it,
``Mul(x, gate(Conv(act(Conv(pool(x))))))`` with ``pool`` a GlobalAveragePool (or ReduceMean over H and W)
and each tensor of the chain read only by the next node. The profile counts it as one ``se`` row
(``profile.py``); the trainable model runs it as the engine's ``SqueezeExcitation`` layer
(``fuse_ops.py``) when the act is SiLU, the gate Sigmoid and both convolutions 1x1 with a bias.

``drop_path_chains``: torchvision's ``StochasticDepth(p, "row")`` as torch's exporter writes it in
training mode, ``Mul(x, Div(Cast(Less(RandomUniformLike(ConstantOfShape([N, 1, 1, 1])), q)), q))``
(a per-sample keep mask with probability q = 1 - p, scaled by 1/q), the random input folded to a
constant by the importer: the trainable model runs it as the engine's drop-connect (``models.pool.
drop_path_scale``), drawn from the model's generator.
"""

from __future__ import annotations

import numpy as np

from models.onnx.fold import decimal
from models.onnx.ir import Node
from models.onnx.op_table import ACTIVATIONS, ops_of

SE_GATES = ("Sigmoid", "HardSigmoid")
SE_POOLS = ops_of("global_pool")


def readers(nodes: list[Node]) -> dict[str, int]:
    """How many node inputs read each tensor."""
    out: dict[str, int] = {}
    for n in nodes:
        for t in n.inputs:
            out[t] = out.get(t, 0) + 1
    return out


def squeeze_excite_chains(nodes: list[Node], constants) -> dict[str, list[Node]]:
    """The Mul node's name -> its chain ``[gate, conv2, act, conv1, pool]`` (output to input)."""
    producer = {t: n for n in nodes for t in n.outputs}
    count = readers(nodes)
    out = {}
    for mul in nodes:
        if mul.op != "Mul" or len(mul.inputs) != 2 or any(t in constants for t in mul.inputs):
            continue
        for gate_t, x in (mul.inputs, mul.inputs[::-1]):
            chain, t = [], gate_t
            for ops in (SE_GATES, ("Conv",), ACTIVATIONS, ("Conv",), SE_POOLS):
                n = producer.get(t)
                if n is None or n.op not in ops or count.get(t) != 1 or (ops is SE_POOLS and not _over_image(n)):
                    break
                chain.append(n)
                t = n.inputs[0]
            else:
                if t == x:
                    out[mul.name] = chain
                    break
    return out


def _over_image(pool: Node) -> bool:
    """A global pool, or a ReduceMean over H and W of an image batch."""
    rank = len(pool.input_shapes[0])
    return pool.op != "ReduceMean" or (rank == 4 and sorted(a % 4 for a in pool.attrs.get("axes", ())) == [2, 3])


def drop_path_keep(mul: Node, producer: dict[str, Node], constants) -> tuple[str, float, list[Node]] | None:
    """For a ``Mul`` that applies torch's stochastic-depth mask: (the tensor it scales, the keep probability q,
    the mask's nodes ``[Div, Cast, Less, RandomUniformLike]``); else None."""
    if mul.op != "Mul" or len(mul.inputs) != 2:
        return None
    for mask_t, x in (mul.inputs, mul.inputs[::-1]):
        div = producer.get(mask_t)
        cast = div and div.op == "Div" and producer.get(div.inputs[0])
        less = cast and cast.op == "Cast" and producer.get(cast.inputs[0])
        rand = less and less.op == "Less" and producer.get(less.inputs[0])
        if not rand or rand.op != "RandomUniformLike" or rand.attrs.get("low", 0.0) != 0.0 \
                or rand.attrs.get("high", 1.0) != 1.0:
            continue
        q, scale = constants.get(less.inputs[1]), constants.get(div.inputs[1])
        if q is None or scale is None or np.size(q) != 1 or np.size(scale) != 1:
            continue
        q, scale = (float(np.asarray(v).reshape(-1)[0]) for v in (q, scale))
        shape = mul.output_shapes[0]
        if q != scale or not 0.0 < q <= 1.0 or x in constants or len(shape) != 4 \
                or tuple(rand.output_shapes[0]) != (shape[0], 1, 1, 1):
            continue
        return x, q, [div, cast, less, rand]
    return None


def fuse_drop_path(nodes: list[Node], constants) -> list[Node]:
    """Each stochastic-depth mask and its Mul (``drop_path_keep``) as one ``DropPath(x)`` node (the Mul's name
    and output; ``ratio``: the drop probability 1 - q), when the mask's tensors are read by nothing else."""
    producer = {t: n for n in nodes for t in n.outputs}
    count = readers(nodes)
    replace, drop = {}, set()
    for mul in nodes:
        found = drop_path_keep(mul, producer, constants)
        if found is None:
            continue
        x, q, mask = found
        if any(count.get(n.outputs[0]) != 1 for n in mask):
            continue
        ratio = 1.0 - decimal(q)
        replace[id(mul)] = Node("DropPath", mul.name, (x,), mul.outputs, (mul.output_shapes[0],), mul.output_shapes,
                                {"ratio": ratio})
        drop.update(id(n) for n in mask)
    return [replace.get(id(n), n) for n in nodes if id(n) not in drop]
