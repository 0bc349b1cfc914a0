"""Each instance's CPUs and thread pools, gathered for the run summary, and the oversubscription check."""

from __future__ import annotations

import os

from launch.train.thread_report import (
    FIELDS,
    describe_threads,
    gather_thread_report,
    local_threads,
    oversubscribed_hosts,
)
from poprun_py.comm import LoopbackComm


def row(cpus=1, host=7, host_cpus=2, numba=1, blas=1, openmp=1):
    return {"cpus": cpus, "host": host, "host_cpus": host_cpus, "numba": numba, "blas": blas, "openmp": openmp}


def test_this_process_reports_its_affinity_and_numbas_threads():
    import models

    mine = local_threads()
    assert set(mine) == set(FIELDS)
    assert mine["cpus"] == len(os.sched_getaffinity(0)) and mine["numba"] == models.get_num_threads()
    assert gather_thread_report(LoopbackComm()) == [mine]


def test_instances_with_equal_counts_are_grouped_in_the_description():
    rows = [row(), row(), row(cpus=2, numba=2, blas=-1)]
    assert describe_threads(rows) == ("2 instances: 1 CPU, numba 1, BLAS 1, OpenMP 1; "
                                      "1 instance: 2 CPUs, numba 2, BLAS not loaded, OpenMP 1")


def test_a_host_is_oversubscribed_when_its_instances_busiest_pools_exceed_its_cpus():
    assert oversubscribed_hosts([row(), row()]) == []  # 1 + 1 threads on 2 CPUs
    assert oversubscribed_hosts([row(blas=2), row(), row(host=8)]) == [([0, 1], 3, 2)]  # BLAS at 2 on instance 0
    assert oversubscribed_hosts([row(numba=2, openmp=2), row(numba=2, openmp=2), row(host=8, numba=4)]) == [
        ([0, 1], 4, 2), ([2], 4, 2)]
