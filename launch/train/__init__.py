"""``poprun-train``: the training command (``launch.train.cli``), its configuration, the loop and what a
run writes. Nothing here imports ``launch.predict`` or ``launch.study``, which are built on it."""
