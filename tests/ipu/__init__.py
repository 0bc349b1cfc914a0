"""Tests of ``ipu``. Shared helpers: ``toy_profiles`` (layers of known cost), ``effnet_profile`` (a hand-made
EfficientNet profile) and ``oracles`` (reference computations the code is checked against)."""
