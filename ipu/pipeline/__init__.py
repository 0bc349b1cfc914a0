"""Pipelining on the device side: a replica cut into stages, one per IPU, and how they take turns.

It holds the split of a profile or model into stages and what each stashes (``split``), the
per-IPU operation schedules (``schedule``), their timing and drawing (``timeline``), and the
execution of one replica's stages with activation and gradient FIFOs in the schedule's order
(``execution``). It is part of the device model: it never imports the runtime (``ipu.runtime``),
which wraps ``execution.PipelinedReplica`` for the engine.
"""
