"""Binding the instances of one host to CPUs (NUMA-aware, ``--process-placement spreadnuma``) and
the thread counts that go with their share of the cores."""

from __future__ import annotations

import glob
import os
import re

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8,10-11`` -> [0, 1, 2, 3, 8, 10, 11] (the kernel's cpulist format)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def numa_nodes(sysfs: str = "/sys/devices/system/node") -> list[list[int]]:
    """The CPUs of each NUMA node of this host; one node with every CPU if sysfs says nothing."""
    nodes = []
    for path in sorted(glob.glob(os.path.join(sysfs, "node[0-9]*", "cpulist")), key=_node_number):
        with open(path) as f:
            cpus = parse_cpulist(f.read())
        if cpus:
            nodes.append(cpus)
    return nodes or [sorted(os.sched_getaffinity(0))]


def _node_number(path: str) -> int:
    match = re.search(r"node(\d+)", path)
    return int(match.group(1)) if match else 0


def spread_cpus(nodes: list[list[int]], allowed: set[int], local_index: int, local_count: int) -> list[int]:
    """The CPUs instance ``local_index`` of ``local_count`` on this host gets.

    With at least as many NUMA nodes as instances, the nodes are divided among the instances in
    contiguous groups (each instance gets whole nodes, CPU and memory locality). With fewer, all
    allowed CPUs are divided into contiguous, equal shares; with more instances than CPUs,
    instances share CPUs round-robin. Never returns an empty list.
    """
    nodes = [[c for c in node if c in allowed] for node in nodes]
    nodes = [n for n in nodes if n]
    if len(nodes) >= local_count:
        per = len(nodes) // local_count
        mine = nodes[local_index * per : (local_index + 1) * per]
        return sorted(c for node in mine for c in node)
    cpus = sorted(c for node in nodes for c in node) or sorted(allowed)
    if len(cpus) < local_count:
        return [cpus[local_index % len(cpus)]]
    share = len(cpus) // local_count
    return cpus[local_index * share : (local_index + 1) * share]


def thread_env(num_cpus: int, environ: dict[str, str]) -> dict[str, str]:
    """Thread settings for an instance that owns ``num_cpus`` CPUs, unless the user set them.

    Thread counts match the CPUs. OpenMP threads (numba's parallel kernels use its OpenMP layer)
    wait passively: spinning threads that share cores with other instances or other jobs made
    training 4x slower on a busy 2-core machine (bench/bench_scaling.py, docs/training.md).
    """
    env = {name: str(max(1, num_cpus)) for name in THREAD_VARS if name not in environ}
    if "OMP_WAIT_POLICY" not in environ:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env
