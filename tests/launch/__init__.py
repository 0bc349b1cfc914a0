"""Tests of ``launch/``: the layering, the console scripts, the examples; one folder per command
(``train/``, ``predict/``, ``study/``)."""
