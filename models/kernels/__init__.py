"""The engine's numba kernels: the compiled loops, BLAS calls and their thread policy under the layers.

Each module here is the machinery of one or more layers (convolutions, norms, products, vector
math), not the model API: layers in ``models/`` import these, and these import no layer, only each
other and the :mod:`jit` package. :mod:`models.kernels.threads` compiles them and chooses their threads.
"""
