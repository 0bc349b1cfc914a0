"""Tests of ``launch/`` (training, checkpoints, studies); ``train_runs`` runs the training command."""
