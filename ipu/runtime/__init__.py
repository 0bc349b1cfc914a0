"""The training runtime that runs on the simulated IPUs: the engine, replicas (single and pipelined),
infeed/outfeed streams, device-side normalisation and sample mixing, precision emulation.

It imports the device model (``ipu.*``: specs, plans, schedules, precision kernels) and never the
reverse.
"""
