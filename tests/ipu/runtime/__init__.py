"""Tests of ``ipu/runtime/``: the engine, replicas, streams, normalisation, precision emulation, phases and
the pipelining API."""
