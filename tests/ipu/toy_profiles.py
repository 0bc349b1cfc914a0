"""A layer profile of known cost, for the memory, cost and pipeline tests (a module of its own:
``from conftest import ...`` finds whichever test folder's conftest was imported first)."""

from models.profile import LayerProfile


def toy_layer(name, block, flops=100, params=10, act=50, saved=40, matmul=True, kind="conv"):
    return LayerProfile(name, block, kind, flops, 2 * flops, params, act, saved, matmul)
