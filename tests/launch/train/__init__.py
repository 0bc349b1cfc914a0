"""Tests of ``launch/train/``: the training command, its configuration, checkpoints and run folders, end to end
runs (``train_runs`` runs the training command)."""
