"""The training runtime that runs on the simulated IPUs: the engine, replicas (single and pipelined),
infeed/outfeed streams, device-side normalisation and sample mixing, precision emulation, and the
user-facing programming model on top of them (``pipelining.pipeline``, ``loops``, ``stages``).

It imports the device model (``ipu.*``: specs, plans, schedules, precision kernels) and never the
reverse.
"""
