"""Tests of ``launch/study/``: study grids, statistics, claims and the study command."""
