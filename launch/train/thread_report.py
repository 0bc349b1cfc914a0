"""What each instance of a job really computes with: its CPUs and the threads of every pool.

An instance's compute has three thread pools that can oversubscribe a host between them: numba's
(the models' kernels), the BLAS library's (OpenBLAS, or MKL) and OpenMP's (the threading layer
numba runs on, and torch's when loaded). ``poprun_py`` sets one thread per CPU an instance owns
(``poprun_py/cpu_binding.py``); this reads what the libraries actually run with, through
threadpoolctl when it is installed (the ``test`` extra), and ``os.sched_getaffinity`` for the CPUs.
:func:`gather_thread_report` collects every instance's counts onto every instance (one small
all-gather), so the run summary can show them side by side and say whether the instances of one
host ask for more threads than it has CPUs.
"""

from __future__ import annotations

import os
import socket
import zlib

import numpy as np

# cpus: this instance's affinity; host: a hash of the host name; host_cpus: the host's CPUs;
# numba, blas, openmp: threads (-1: that pool is not loaded, or threadpoolctl is not installed)
FIELDS = ("cpus", "host", "host_cpus", "numba", "blas", "openmp")


def local_threads() -> dict[str, int]:
    """This process: CPUs it may run on, numba's threads, and the largest BLAS and OpenMP pools."""
    from models import get_num_threads

    counts = {"cpus": len(os.sched_getaffinity(0)), "host": zlib.crc32(socket.gethostname().encode()),
              "host_cpus": os.cpu_count() or 1, "numba": int(get_num_threads()), "blas": -1, "openmp": -1}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return counts
    for pool in threadpool_info():
        key = "blas" if pool.get("user_api") == "blas" else "openmp" if pool.get("user_api") == "openmp" else None
        if key is not None:
            counts[key] = max(counts[key], int(pool.get("num_threads") or 0))
    return counts


def gather_thread_report(comm) -> list[dict[str, int]]:
    """Every instance's :func:`local_threads`, in rank order (collective: every instance calls it)."""
    mine = local_threads()
    rows = comm.allgather(np.array([mine[k] for k in FIELDS], np.int64))
    return [dict(zip(FIELDS, map(int, row))) for row in rows.reshape(-1, len(FIELDS))]


def busiest_pool(row: dict[str, int]) -> int:
    """The most threads one of the instance's pools can run at once (they take turns, not add up:
    the BLAS runs single-threaded inside numba's threads, and numba's threads are OpenMP's)."""
    return max(row["numba"], row["blas"], row["openmp"], 1)


def describe_threads(rows: list[dict[str, int]]) -> str:
    """``2 instances: 1 CPU, numba 1, BLAS 1, OpenMP 1`` (instances with equal counts grouped)."""
    groups: dict[tuple, int] = {}
    for row in rows:
        key = tuple(row[k] for k in ("cpus", "numba", "blas", "openmp"))
        groups[key] = groups.get(key, 0) + 1

    def pool(n: int) -> str:
        return "not loaded" if n < 0 else str(n)

    return "; ".join(f"{n} instance{'s' * (n != 1)}: {cpus} CPU{'s' * (cpus != 1)}, numba {pool(nb)}, BLAS {pool(blas)}, "
                     f"OpenMP {pool(omp)}" for (cpus, nb, blas, omp), n in groups.items())


def oversubscribed_hosts(rows: list[dict[str, int]]) -> list[tuple[list[int], int, int]]:
    """(instances, threads, CPUs) of every host whose instances' busiest pools add up to more
    threads than it has CPUs."""
    hosts: dict[int, list[int]] = {}
    for index, row in enumerate(rows):
        hosts.setdefault(row["host"], []).append(index)
    out = []
    for members in hosts.values():
        threads, cpus = sum(busiest_pool(rows[i]) for i in members), rows[members[0]]["host_cpus"]
        if threads > cpus:
            out.append((members, threads, cpus))
    return out


__all__ = ["FIELDS", "busiest_pool", "describe_threads", "gather_thread_report", "local_threads", "oversubscribed_hosts"]
