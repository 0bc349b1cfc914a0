"""ONNX's Einsum trains (``models.onnx.ops_einsum``): the equation made explicit (ellipsis, implicit output) with
exact expected subscripts, float64 finite-difference checks of the op for attention's two contractions, an
implicit output, a broadcast ellipsis, a letter summed within one operand, three operands, an image-shaped
operand and a constant weight; a MaxViT-style attention block whose logits and gradients equal torch's in float64
at another batch than the export's; refusals that name the equation."""

from __future__ import annotations

import numpy as np
import pytest

from models.onnx.ops_einsum import Einsum, einsum_macs, einsum_terms, letter_sizes
from models.param import Param
from tests.models.gradcheck import check_layer
from tests.models.onnx_parity import Operands, assert_step_equals_torch, graph_ops, nhwc_shape

torch = pytest.importorskip("torch")
nn = torch.nn


@pytest.mark.parametrize("equation,ranks,terms,out", [
    ("bghid,bghjd->bghij", [5, 5], ["bghid", "bghjd"], "bghij"),
    ("ij,jk", [2, 2], ["ij", "jk"], "ik"),  # implicit: the letters used once, alphabetically
    ("ba,ca", [2, 2], ["ba", "ca"], "bc"),
    ("...ij,...jk->...ik", [4, 3], ["abij", "bjk"], "abik"),  # the ellipsis right-aligned
    ("...ij,...jk", [3, 3], ["aij", "ajk"], "aik"),  # implicit with an ellipsis: its axes first
    (" i j , j -> i ", [2, 1], ["ij", "j"], "i"),
])
def test_einsum_terms_are_explicit(equation, ranks, terms, out):
    assert einsum_terms(equation, ranks) == (terms, out)


@pytest.mark.parametrize("equation,ranks,says", [
    ("ii->i", [2], "repeats a letter"),
    ("ij,jk", [2, 3], "does not name each"),
    ("ij->ii", [2], "each letter once"),
    ("ij,jk->ik", [2], "names 2 operands"),
])
def test_einsum_terms_refuse_what_is_not_taken(equation, ranks, says):
    with pytest.raises(ValueError, match=says):
        einsum_terms(equation, ranks)


def test_letter_sizes_refuse_a_broadcast_size_one_axis():
    assert letter_sizes(["ij", "jk"], [(2, 3), (3, 4)]) == {"i": 2, "j": 3, "k": 4}
    assert einsum_macs(["ij", "jk"], "ik", [(2, 3), (3, 4)]) == 24
    with pytest.raises(ValueError, match="broadcasting a size-1 axis"):
        letter_sizes(["aij", "ajk"], [(1, 2, 3), (4, 3, 2)])



@pytest.mark.parametrize("equation,shapes", [
    ("bghid,bghjd->bghij", [(2, 1, 2, 3, 4), (2, 1, 2, 5, 4)]),  # MaxViT's scores
    ("bghij,bghjd->bghid", [(2, 1, 2, 3, 5), (2, 1, 2, 5, 4)]),  # and its values
    ("ij,jk", [(3, 4), (4, 2)]),
    ("...ij,...jk->...ik", [(2, 3, 3, 4), (3, 4, 2)]),
    ("ij,j->j", [(3, 4), (4,)]),  # i summed within the first operand alone
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("nchw,c->nhw", [(2, 3, 4, 5), (3,)]),  # an image-shaped operand (NHWC in the engine)
])
def test_einsum_backward_matches_finite_differences(equation, shapes):
    terms, out = einsum_terms(equation, [len(s) for s in shapes])
    engine = [nhwc_shape(s) for s in shapes]
    x = np.random.default_rng(0).standard_normal(sum(int(np.prod(s)) for s in engine))
    op = Einsum("e", [f"x{i}" for i in range(len(shapes))], "y", terms, out)
    check_layer(Operands(op, *engine), x, samples=40, rtol=1e-6)


def test_einsum_with_a_constant_weight_matches_finite_differences():
    rng = np.random.default_rng(1)
    op = Einsum("e", ["x", Param("w", rng.standard_normal((4, 3)), "weight")], "y", ["bij", "jk"], "bik")
    check_layer(Operands(op, (2, 5, 4)), rng.standard_normal(40), samples=30, rtol=1e-6)


class GridAttention(nn.Module):
    """torchvision MaxViT's ``RelativePositionalMultiHeadAttention`` in small: the feature map split into windows
    ``[N, windows, tokens, D]``, heads as a fifth axis, scores and values by Einsum, a relative-position bias
    gathered from a table by a constant index into ``[1, heads, t, t]`` (a computed image-shaped tensor added to
    rank-5 scores)."""

    def __init__(self, dim: int = 8, heads: int = 2, window: int = 2) -> None:
        super().__init__()
        self.heads, self.window, self.scale = heads, window, (dim // heads) ** -0.5
        self.stem = nn.Conv2d(3, dim, 3, padding=1)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        t = window * window
        self.table = nn.Parameter(torch.randn(2 * t, heads) * 0.1)
        self.register_buffer("index", torch.arange(t * t) % (2 * t))
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        x = self.stem(x)
        n, d, h, w = x.shape
        p = self.window
        x = x.reshape(n, d, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(n, (h // p) * (w // p), p * p, d)
        b, g, t, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, g, t, self.heads, 3 * d // self.heads).permute(0, 1, 3, 2, 4).chunk(3, -1)
        bias = self.table[self.index].reshape(t, t, self.heads).permute(2, 0, 1).unsqueeze(0)
        scores = torch.einsum("bghid,bghjd->bghij", q * self.scale, k) + bias
        out = torch.einsum("bghij,bghjd->bghid", torch.softmax(scores, dim=-1), v)
        x = x + self.proj(out.permute(0, 1, 3, 2, 4).reshape(b, g, t, d))
        return self.head(x.mean((1, 2)))


def test_a_maxvit_style_attention_block_trains_as_torchs_in_float64():
    torch.manual_seed(0)
    model = assert_step_equals_torch(GridAttention(), (2, 3, 4, 4), read_at=2, batch=3)
    assert sum(type(op).__name__ == "Einsum" for op in graph_ops(model)) == 2
