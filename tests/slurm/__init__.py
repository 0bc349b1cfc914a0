"""Tests on a one-node Slurm cluster (``slurm_cluster``), its jobs (``slurm_jobs``) and waits on events (``events``)."""
