"""2-D convolution in NHWC with any kernel, stride, padding and groups.

Weights are stored OIHW (``[Cout, Cin/groups, KH, KW]``), exactly as in a PyTorch
state_dict, so parameters and gradients need no conversion. Three paths:

* pointwise (1x1, stride 1, no padding, groups 1): one GEMM on the ``[N*H*W, C]`` view, through
  BLAS or, for the shapes where it is faster, register-blocked numba kernels
  (``kernels/pointwise.py``; the rules are ``suits`` and ``suits_weight_grad``);
* depthwise (groups == Cin == Cout): parallel numba kernels over ``[KH, KW, C]`` weights;
* direct (grouped, both group widths multiples of 16, e.g. G16): register-blocked numba kernels
  on the ``[N, H, W, G, Cg]`` view, no im2col (``kernels/direct_conv.py``); the input gradient
  is a convolution of ``dy`` with the flipped kernel, one per stride phase;
* everything else (regular, other grouped, and any dilated convolution): im2col into reused per-group
  columns ``[G, N*Ho*Wo, KH*KW*Cg]``, then one batched GEMM; backward uses col2im.

Padding: ``"same"`` is TensorFlow's (output ``ceil(H/stride)``, extra pixel at the bottom/
right), ``"symmetric"`` is PyTorch's ``(k-1)//2`` on every side, an int or a
``(top, bottom, left, right)`` tuple is explicit. ``dilation`` (torch's) spaces the kernel's taps; the
paddings and the output size are those of the dilated kernel, ``(k - 1) * dilation + 1`` wide.
"""

from __future__ import annotations

import math

import numpy as np

from models.conv_pointwise import WGRAD_CHUNKS, PointwiseProducts
from models.kernels import conv as K
from models.kernels import direct_conv as D
from models.kernels import gemm as _gemm
from models.kernels import small_map as S
from models.kernels import threads as _threads
from models.kernels import wisdom as W
from models.layer import Layer, Shape
from models.param import Param
from models.profile import ConvShape

_DW_CHUNKS = 16  # row chunks for the depthwise weight-gradient reduction


def same_pads(size: int, k: int, s: int) -> tuple[int, int]:
    """TensorFlow "SAME" padding (before, after) for one spatial dimension."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def resolve_padding(padding, kh: int, kw: int, sh: int, sw: int, h: int, w: int):
    """(top, bottom, left, right) for a padding spec and input size."""
    if padding == "same":
        return same_pads(h, kh, sh) + same_pads(w, kw, sw)
    if padding == "symmetric":
        ph, pw = (kh - 1) // 2, (kw - 1) // 2
        return ph, ph, pw, pw
    if isinstance(padding, int):
        return padding, padding, padding, padding
    if isinstance(padding, tuple) and len(padding) == 4:
        return tuple(int(p) for p in padding)
    raise ValueError(f"conv padding {padding!r}: use 'same', 'symmetric', an int or (top, bottom, left, right)")


def _phase_taps(phase: int, pad: int, stride: int, k: int) -> tuple[slice | None, int]:
    """For input-gradient rows ``phase + stride*a``: the kernel taps that reach them, as a slice
    in the order the flipped (correlation) kernel uses (None: no tap does), and that kernel's
    leading padding. Tap ``kh`` reads ``dy`` row ``(phase + pad - kh) / stride + a`` when the
    division is exact."""
    first = (phase + pad) % stride
    count = len(range(first, k, stride))
    if count == 0:
        return None, 0
    last = first + stride * (count - 1)
    return slice(last, None if first == 0 else first - 1, -stride), count - 1 - (phase + pad - first) // stride


class Conv2d(PointwiseProducts, Layer):
    """Convolution; keeps its input (pointwise, depthwise, direct) or its im2col columns (others)."""

    kind = "conv"
    output_private = True

    def __init__(self, name: str, block: str, cin: int, cout: int, kernel: int | tuple[int, int],
                 stride: int = 1, padding="symmetric", groups: int = 1, bias: bool = False,
                 dtype=np.float32, rng: np.random.Generator | None = None,
                 dilation: int | tuple[int, int] = 1) -> None:
        super().__init__(name, block, dtype)
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        if groups < 1 or cin % groups or cout % groups:
            raise ValueError(f"conv {name}: groups={groups} must divide in={cin} and out={cout} channels")
        dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
        if dh < 1 or dw < 1:
            raise ValueError(f"conv {name}: dilation must be >= 1, got {dilation}")
        self.cin, self.cout, self.kh, self.kw, self.groups = cin, cout, kh, kw, groups
        self.dh, self.dw = (dh if kh > 1 else 1), (dw if kw > 1 else 1)  # a 1-wide kernel has nothing to space
        self.sh, self.sw = (stride, stride) if isinstance(stride, int) else stride
        resolve_padding(padding, kh, kw, self.sh, self.sw, 1, 1)  # validate early
        self.padding = padding
        self.need_dx = True
        rng = rng or np.random.default_rng(0)
        std = math.sqrt(2.0 / (cout * kh * kw))  # kaiming normal, fan_out (torchvision)
        w = rng.standard_normal((cout, cin // groups, kh, kw)) * std
        self.weight = Param(self._key("weight"), w.astype(self.dtype), "weight")
        self.bias = Param(self._key("bias"), np.zeros(cout, self.dtype), "bias") if bias else None
        if (self.dh, self.dw) != (1, 1):
            self.path = "im2col"  # the one path whose kernels take a dilation
        elif kh == kw == 1 and self.sh == self.sw == 1 and groups == 1 and self._pads(1, 1) == (0, 0, 0, 0):
            self.path = "pointwise"
        elif groups == cin == cout:
            self.path = "depthwise"
            self.kind = "dwconv"
        elif D.vec_for(cout // groups) and (D.vec_for(cin // groups) and (groups > 1 or cin <= 32) or cin <= 4):
            self.path = "direct"  # groups of multiples of 8 channels (G16), small regular convs, RGB stems
        else:
            self.path = "im2col"
        self._path_chosen = self.path != "direct"  # see _choose_grouped_path

    def params(self) -> list[Param]:
        return [self.weight] + ([self.bias] if self.bias is not None else [])

    @property
    def span(self) -> tuple[int, int]:
        """The kernel's extent in the input, dilation included."""
        return (self.kh - 1) * self.dh + 1, (self.kw - 1) * self.dw + 1

    def _pads(self, h: int, w: int):
        return resolve_padding(self.padding, *self.span, self.sh, self.sw, h, w)

    def out_shape(self, shape: Shape) -> Shape:
        n, h, w, _ = shape
        pt, pb, pl, pr = self._pads(h, w)
        eh, ew = self.span
        return n, (h + pt + pb - eh) // self.sh + 1, (w + pl + pr - ew) // self.sw + 1, self.cout

    # -- forward / backward --------------------------------------------------------------
    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        if x.ndim != 4 or x.shape[3] != self.cin:
            raise ValueError(f"conv {self.name}: expected NHWC input with {self.cin} channels, got shape {x.shape}")
        self.x_shape = x.shape
        n, ho, wo, _ = self.out_shape(x.shape)
        y = self._buf("y", (n, ho, wo, self.cout))
        if self.path == "pointwise":
            self.x = x  # kept for the weight gradient
            self._forward_pointwise(x.reshape(-1, self.cin), y.reshape(-1, self.cout))
        elif self.path == "depthwise":
            self.x = x
            pt, _, pl, _ = self._pads(x.shape[1], x.shape[2])
            K.dw_forward(x, self._dw_weight(), y, self.sh, self.sw, pt, pl)
        elif self.path == "direct" and training and not self._path_chosen:
            self._choose_grouped_path(x)
            return self.forward(x, training)
        elif self.path == "direct":
            self.x = x
            pt, _, pl, _ = self._pads(x.shape[1], x.shape[2])
            self._direct_conv(self._split(x), self._direct_weight(), self._split(y), self.sh, self.sw, pt, pl)
        else:
            self._forward_im2col(x, y, ho, wo)
        if self.bias is not None:
            y += self.bias.data
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray | None:
        if self.bias is not None:
            self.bias.grad[...] = dy.reshape(-1, self.cout).sum(axis=0, dtype=np.float64)
        if self.path == "pointwise":
            return self._backward_pointwise(dy)
        if self.path == "depthwise":
            return self._backward_depthwise(dy)
        if self.path == "direct":
            return self._backward_direct(dy)
        return self._backward_im2col(dy)

    def _choose_grouped_path(self, x: np.ndarray) -> None:
        """Once per layer, at its first training forward: the direct kernels or im2col + GEMM, whichever
        this machine measured faster, forward and backward, for the shape (``wisdom``; the direct
        kernels without it). Each is tried on a copy of the input, with the layer's own buffers (not the
        model's gradient pool); the parameters' gradients are put back afterwards."""
        self._path_chosen = True
        if not W.enabled() or self.dtype != np.float32:
            return
        xc, dy = x.copy(), np.ones(self.out_shape(x.shape), self.dtype)
        saved = [p.grad.copy() for p in self.params()]
        pool, expendable = self.grad_pool, self.input_expendable  # the trials touch neither the model's
        self.grad_pool, self.input_expendable = None, False     # gradient pool nor the real input

        def trial(path):
            def run():
                self.path = path
                self.forward(xc, True)
                self.backward(dy)
            return run

        shape = (*x.shape, self.cout, self.kh, self.kw, self.sh, self.sw, self.groups, *self._pads(*x.shape[1:3]),
                 int(self.need_dx))
        self.path = W.choose("conv.grouped", shape, {"direct": trial("direct"), "im2col": trial("im2col")}, "direct")
        for p, g in zip(self.params(), saved):
            p.grad[...] = g
        self.grad_pool, self.input_expendable = pool, expendable

    def _direct_conv(self, x5, w5, y5, sh, sw, pt, pl, phase=(0, 0, 1, 1)) -> None:
        """D.conv with its per-chunk row scratch (kept per kernel size: the input gradient's
        stride phases use smaller kernels), into ``y5`` at ``phase`` (see D.conv)."""
        if pt < 0:  # (input-gradient phases of a padding wider than the kernel) taps start inside
            x5, pt = x5[:, -pt:], 0
        if pl < 0:
            x5, pl = x5[:, :, -pl:], 0
        ho, wo = D.phase_shape(y5.shape, phase)
        chunks = max(1, min(2 * _threads.get_num_threads(), y5.shape[0] * ho))
        kh, kw = w5.shape[1], w5.shape[2]
        tile = D.tile_for(D.vec_for(y5.shape[4]), wo)
        scratch = self._temp("conv_rows", (chunks, kh, x5.shape[3], D.scratch_width(wo, kw, sw, tile), x5.shape[4]))
        D.conv(x5, w5, y5, sh, sw, pt, pl, scratch, tile, phase)

    def _weight_grad(self, x5: np.ndarray, dy5: np.ndarray, pads: tuple[int, int]) -> np.ndarray:
        """The direct path's weight gradient [G, KH, KW, Cg, Cog], through the formulation this machine
        measured fastest for the shape (``wisdom``; without it the rule: the by-group kernel on small
        maps, ``S.suits_group_weight_grad``, else the chunked one): by-group (``small_map``), chunked
        per-chunk partials summed in order (``direct_conv``), or im2col + one GEMM per group."""
        n, ho, wo = dy5.shape[:3]
        g, cg, cog = x5.shape[3], x5.shape[4], dy5.shape[4]
        kh, kw, sh, sw = self.kh, self.kw, self.sh, self.sw

        def by_group():
            out = self._temp("conv_wgrad_groups", (g, kh, kw, cg, cog))
            S.group_weight_grad(x5, dy5, out, sh, sw, *pads)
            return out

        def chunked():
            block = max(1, min(ho, D.BLOCK_PIXELS // wo))  # output rows per scratch fill
            chunks = max(1, min(WGRAD_CHUNKS, n * -(-ho // block)))  # not the thread count: see WGRAD_CHUNKS
            part = self._temp("conv_wgrad_part", (chunks, g, kh, kw * cg, cog))
            scratch = self._temp("conv_wgrad_rows", (chunks, (block - 1) * sh + kh, (wo - 1) * sw + kw, cg))
            D.weight_grad(x5, dy5, part, sh, sw, *pads, block, scratch)
            return part.sum(axis=0).reshape(g, kh, kw, cg, cog)

        def gemm():
            cols = self._temp("conv_wgrad_cols", (g, n * ho * wo, kh * kw * cg))
            out = self._temp("conv_wgrad_groups", (g, kh * kw * cg, cog))
            return K.im2col_weight_grad(x5, dy5, kh, kw, sh, sw, *pads, cols, out).reshape(g, kh, kw, cg, cog)

        small = S.suits_group_weight_grad(ho, wo, g, cg, cog)
        candidates = {"small_map": by_group} if S.eligible(g, cg, cog) else {}
        candidates.update(direct=chunked, im2col=gemm)
        shape = (*x5.shape, cog, kh, kw, sh, sw, *pads)
        return candidates[W.choose("conv.weight_grad", shape, candidates, "small_map" if small else "direct")]()

    def _dw_weight(self) -> np.ndarray:
        wt = self._temp("conv_weight", (self.kh, self.kw, self.cout))
        np.copyto(wt, self.weight.data[:, 0].transpose(1, 2, 0))
        return wt

    def _backward_depthwise(self, dy):
        pt, _, pl, _ = self._pads(self.x_shape[1], self.x_shape[2])
        chunks = max(1, min(_DW_CHUNKS, dy.shape[0] * dy.shape[1]))
        part = self._temp("conv_wgrad_part", (chunks, self.kh, self.kw, self.cout))
        K.dw_backward_weight(self.x, dy, part, self.sh, self.sw, pt, pl)
        self.weight.grad[:, 0] = part.sum(axis=0).transpose(2, 0, 1)
        if not self.need_dx:
            return None
        dx = self._input_grad_buf()
        K.dw_backward_input(dy, self._dw_weight(), dx, self.sh, self.sw, pt, pl)
        return dx

    def _input_grad_buf(self) -> np.ndarray:
        """The buffer for dx, called once the weight gradient has read the input: the input itself
        when it is expendable (``Layer.mark_input_expendable``; the dx kernels read only dy and the
        weights), else the pool's."""
        return self._grad_buf(self.x_shape, self.x if self.input_expendable else None)

    def _split(self, a: np.ndarray) -> np.ndarray:
        """NHWC -> [N, H, W, G, C/G] (a view of a contiguous array)."""
        return np.ascontiguousarray(a).reshape(*a.shape[:3], self.groups, a.shape[3] // self.groups)

    def _direct_weight(self) -> np.ndarray:
        """OIHW -> [G, KH, KW, Cg, Cog]."""
        g, cg, cog = self.groups, self.cin // self.groups, self.cout // self.groups
        wd = self._temp("conv_weight", (g, self.kh, self.kw, cg, cog))
        np.copyto(wd, self.weight.data.reshape(g, cog, cg, self.kh, self.kw).transpose(0, 3, 4, 2, 1))
        return wd

    def _backward_direct(self, dy):
        g, cg, cog = self.groups, self.cin // self.groups, self.cout // self.groups
        pt, _, pl, _ = self._pads(self.x_shape[1], self.x_shape[2])
        dy5 = self._split(dy)
        self.weight.grad[...] = self._weight_grad(self._split(self.x), dy5, (pt, pl)).transpose(0, 4, 3, 1, 2).reshape(
            self.weight.grad.shape)
        if not self.need_dx:
            return None
        dx = self._input_grad_buf()
        wt = self.weight.data.reshape(g, cog, cg, self.kh, self.kw).transpose(0, 3, 4, 1, 2)  # [G, KH, KW, Cog, Cg]
        if D.vec_for(cg):
            dx5 = self._split(dx)
        else:  # a stem: the input gradient's channels padded to 8 with zero weights
            cgp = -(-cg // 8) * 8
            dx5 = self._temp("conv_dx_padded", (*self.x_shape[:3], g, cgp))
            wt = np.concatenate([wt, np.zeros((*wt.shape[:4], cgp - cg), wt.dtype)], axis=4)
        for ph in range(self.sh):
            rows, top = _phase_taps(ph, pt, self.sh, self.kh)
            for pw in range(self.sw):
                cols, left = _phase_taps(pw, pl, self.sw, self.kw)
                if rows is None or cols is None:
                    dx5[:, ph::self.sh, pw::self.sw] = 0
                    continue
                self._direct_conv(dy5, np.ascontiguousarray(wt[:, rows][:, :, cols]), dx5, 1, 1, top, left,
                                  (ph, pw, self.sh, self.sw))
        if not D.vec_for(cg):
            np.copyto(self._split(dx), dx5[..., :cg])
        return dx

    def _group_weight(self) -> np.ndarray:
        """OIHW -> [G, KH*KW*Cg, Cog], matching the im2col column order (kh, kw, c)."""
        g, cg, cog = self.groups, self.cin // self.groups, self.cout // self.groups
        w = self.weight.data.reshape(g, cog, cg, self.kh, self.kw).transpose(0, 3, 4, 2, 1)
        wg = self._temp("conv_weight", (g, self.kh * self.kw * cg, cog))
        np.copyto(wg, w.reshape(g, -1, cog))
        return wg

    def _forward_im2col(self, x, y, ho, wo):
        g, cog = self.groups, self.cout // self.groups
        n = x.shape[0]
        pt, _, pl, _ = self._pads(x.shape[1], x.shape[2])
        p = n * ho * wo
        cols = self._buf("cols", (g, p, self.kh * self.kw * self.cin // g))
        K.im2col(x, cols, ho, wo, self.kh, self.kw, self.sh, self.sw, pt, pl, self.dh, self.dw)
        self.cols = cols  # kept for the weight gradient
        wg = self._group_weight()
        if g == 1:
            _gemm.matmul(cols[0], wg[0], y.reshape(p, self.cout))
        else:
            out = self._temp("conv_out_groups", (g, p, cog))
            _gemm.matmul_batched(cols, wg, out)
            np.copyto(y.reshape(p, g, cog), out.transpose(1, 0, 2))

    def _backward_im2col(self, dy):
        g, cg, cog = self.groups, self.cin // self.groups, self.cout // self.groups
        n, ho, wo, _ = dy.shape
        p = n * ho * wo
        if g == 1:
            dyg = dy.reshape(1, p, cog)
        else:
            dyg = self._temp("conv_dy_groups", (g, p, cog))
            np.copyto(dyg, dy.reshape(p, g, cog).transpose(1, 0, 2))
        dwg = self._temp("conv_wgrad", (g, self.kh * self.kw * cg, cog))
        if g == 1:
            _gemm.matmul_tn(self.cols[0], dyg[0], dwg[0], self._temp("gemm_partials", _gemm.scratch_shape(*dwg.shape[1:])))
        else:
            _gemm.matmul_batched(self.cols.transpose(0, 2, 1), dyg, dwg)
        self.weight.grad[...] = dwg.reshape(g, self.kh, self.kw, cg, cog).transpose(0, 4, 3, 1, 2).reshape(
            self.weight.grad.shape)
        if not self.need_dx:
            return None
        dcols = self.cols  # the columns are no longer needed: reuse them for their gradient
        if g == 1:
            _gemm.matmul(dyg[0], self._group_weight()[0].T, dcols[0])
        else:
            _gemm.matmul_batched(dyg, self._group_weight().transpose(0, 2, 1), dcols)
        pt, _, pl, _ = self._pads(self.x_shape[1], self.x_shape[2])
        dx = self._grad_buf(self.x_shape)
        K.col2im(dcols, dx, ho, wo, self.kh, self.kw, self.sh, self.sw, pt, pl, self.dh, self.dw)
        return dx

    # -- cost model ----------------------------------------------------------------------
    def profile(self, shape: Shape):
        n, ho, wo, _ = self.out_shape(shape)
        macs = n * ho * wo * self.cout * self.kh * self.kw * (self.cin // self.groups)
        saved = int(np.prod(shape)) if self.path != "im2col" else n * ho * wo * self.kh * self.kw * self.cin
        geometry = ConvShape(n, (shape[1], shape[2]), self.cin, self.cout, (self.kh, self.kw), self.sh,
                             self.groups, out_hw=(ho, wo))
        return [self._record(shape, 2 * macs, 4 * macs, saved, matmul=True, conv=geometry)]
