"""models.param: one buffer for every gradient, and finding arrays that lie back to back."""

import numpy as np

from models.param import Param, generation, pack_grads, span


# ---------------------------------------------------------------- one gradient buffer
def test_pack_grads_makes_the_gradients_consecutive_views_and_keeps_their_values():
    params = [Param("a.weight", np.zeros((2, 3), np.float32)), Param("b.bias", np.zeros(4, np.float32), "bias")]
    params[0].grad[...] = np.arange(6).reshape(2, 3)
    params[1].grad[...] = [6, 7, 8, 9]
    flat = pack_grads(params)
    assert flat.tolist() == list(range(10))
    assert params[0].grad.shape == (2, 3) and np.shares_memory(params[0].grad, flat)
    params[1].grad[0] = 60.0  # a layer writing its gradient writes the buffer
    assert flat[6] == 60.0
    assert span([p.grad for p in params]).tolist() == flat.tolist()
    assert pack_grads([Param("c", np.zeros(2, np.float32)), Param("d", np.zeros(2, np.float64))]) is None


def test_span_is_one_view_only_for_arrays_back_to_back_in_one_buffer():
    flat = np.arange(12, dtype=np.float64)
    views = [flat[0:4].reshape(2, 2), flat[4:10], flat[10:12]]
    whole = span(views)
    assert whole.tolist() == flat.tolist() and np.shares_memory(whole, flat)
    assert span(views[1:]).tolist() == list(range(4, 12))
    assert span([views[0], views[2]]) is None  # a gap
    assert span([views[1], views[0]]) is None  # out of order
    assert span([flat[0:4], np.zeros(8)]) is None  # another buffer
    assert span([flat[::2]]) is None  # not contiguous
    again = [flat[0:4].reshape(2, 2), flat[4:10], flat[10:12]]
    assert span(again).tolist() == flat.tolist()  # new objects: asked afresh, same answer


def test_the_generation_changes_when_an_array_is_replaced_and_only_then():
    p = Param("a.weight", np.zeros((2, 3), np.float32))
    start = generation()
    p.data += 1.0  # in place: the same arrays
    p.grad[...] = 2.0
    assert generation() == start
    p.grad = np.zeros_like(p.data)
    assert generation() == start + 1
    pack_grads([p])  # rebinds every gradient
    assert generation() == start + 2
