"""Collectives between IPUs: the gradient all-reduce, the cross-replica norm statistics, the syncs.

* **Links.** A transfer over IPU-Links runs at ``link_efficiency`` of the links' rate: 0.85, the
  efficiency poplibs' test IPU model gives every IPU-Link (``lib/poplibs_test/Util.cpp``
  ``addGlobalExchangeConstraints``: ``linkEfficiency = 0.85``).
* **Global sync** between IPUs: 15 ns per hop, one hop within a card plus one per pair of cards, there
  and back (``Util.cpp`` ``setGlobalSyncLatency``: ``syncLatencyPerHop = 15e-9``,
  ``numHops = 1 + numIPUs / 4``, ``x 2``); ``global_sync_s``.
* **Gradient all-reduce**: a bandwidth-optimal ring inside each IPU-Link domain over
  ``allreduce_ring_links`` IPU-Links per IPU, then a ring between domains. Each ring step pays a
  global sync across the ring and one compute set on the tiles (``ipu.cost.bsp``).
* **Between domains** (POD128 and up) the outer ring's rate is a **calibration**, not a link rate:
  ``outer_ring_bytes_per_s`` makes the model's POD256 step exceed its POD128 step by what Graphcore's
  MLPerf Training v1.1 ResNet-50 logs measure at the same per-replica work (``ipu.cost.evidence.mlperf_v11``,
  Mk2 only), the logs' epochs read with ``Assumptions.outer_ring_statistic``. It is calibrated under
  the assumptions it is given (their compute-set and global-sync latencies), unless they set the rate.
  The sum of all machines' GW-Links (the first model: about 280 GB/s per POD64 domain) predicted a
  tenth of the measured difference.
* **Cross-replica norm** (the ResNet recipes' ``BN_span``): each batch norm sums its statistics over
  ``span`` neighbouring replicas, forward (mean and mean of squares) and backward (the two gradient
  sums), as a ring of ``span`` IPUs over the same IPU-Links.

The efficiencies, link counts, sync latency and the calibration's statistic are fields of
``ipu.cost.assumptions.Assumptions``, which every function here that uses one takes.
"""

from __future__ import annotations

import functools

from ipu.cost import bsp
from ipu.cost.assumptions import Assumptions
from ipu.cost.bsp import Cycles
from ipu.cost.evidence import mlperf_v11
from ipu.specs import IpuSpec

NORM_STAT_BYTES = 4  # float statistics (the recipes' norms accumulate in float)
RESNET50_PARAMS = 25_557_032  # models.build_model("resnet50"); the calibration's gradient tensor
MLPERF_GRADIENT_BYTES = 2  # 16.16: float16 gradients, as the model all-reduces them (precision.accumulator_bytes)


def global_sync_s(num_ipus: int, assumptions: Assumptions) -> float:
    """One global sync across ``num_ipus`` IPUs (poplibs' test IPU model)."""
    if num_ipus <= 1:
        return 0.0
    hops = 1 + num_ipus // 4
    return assumptions.global_sync_s_per_hop * hops * 2


def ring_step_s(num_ipus: int, clock_hz: float, assumptions: Assumptions) -> float:
    """Fixed cost of one step of a ring over ``num_ipus`` IPUs: a global sync across them and one
    compute set (its sync and fixed exchange) on the tiles."""
    return global_sync_s(num_ipus, assumptions) + bsp.superstep_fixed_cycles(assumptions) / clock_hz


def ring_link_bytes_per_s(spec: IpuSpec, assumptions: Assumptions) -> float:
    """What one IPU sends into an all-reduce ring over its IPU-Links."""
    return spec.ipu_link_bytes_per_s / spec.ipu_links * assumptions.allreduce_ring_links * assumptions.link_efficiency


def ring_all_reduce_s(nbytes: float, members: int, bytes_per_s: float, step_s: float) -> float:
    """A bandwidth-optimal ring all-reduce of ``nbytes`` over ``members``: 2 (n - 1) steps, each moving
    1/n of the data (reduce-scatter, then all-gather)."""
    if members <= 1:
        return 0.0
    return 2 * (members - 1) / members * nbytes / bytes_per_s + 2 * (members - 1) * step_s


def calibrate_outer_ring(gradient_bytes: float, delta_s: float, small: int, large: int, small_step_s: float,
                         large_step_s: float) -> float:
    """The outer ring's rate that makes ``large`` domains take ``delta_s`` longer than ``small`` domains
    for the same gradient (ring steps of ``large_step_s`` and ``small_step_s``): solves
    ``ring_all_reduce_s(large) - ring_all_reduce_s(small) = delta_s``."""
    traffic = (2 * (large - 1) / large - 2 * (small - 1) / small) * gradient_bytes
    latency = 2 * (large - 1) * large_step_s - 2 * (small - 1) * small_step_s
    if delta_s <= latency or traffic <= 0:
        raise ValueError(f"cannot calibrate the outer ring: {delta_s * 1e3:.3f} ms is not more than the "
                         f"{latency * 1e3:.3f} ms of ring-step latency between {small} and {large} domains")
    return traffic / (delta_s - latency)


def outer_step_s(total_ipus: int, clock_hz: float, assumptions: Assumptions) -> float:
    """A step of the ring between IPU-Link domains: a global sync across the whole partition."""
    return ring_step_s(total_ipus, clock_hz, assumptions)


MK2_CLOCK_HZ = 1.33e9  # the calibration's chip (ipu.specs.MK2_GC200)


@functools.lru_cache(maxsize=64)
def outer_ring_bytes_per_s(assumptions: Assumptions) -> float:
    """The outer ring's rate: ``assumptions.outer_ring_bytes_per_s`` if set, else the calibration on the
    Mk2 MLPerf v1.1 logs only: POD256 (4 domains) over POD128 (2 domains), same work per replica, with
    these assumptions' ring-step latencies (the lower quartile of the epochs: 1.794 ms more per step for
    25.6 MB more of the outer ring's traffic, about 14.3 GB/s)."""
    if assumptions.outer_ring_bytes_per_s is not None:
        return assumptions.outer_ring_bytes_per_s
    return calibrate_outer_ring(
        RESNET50_PARAMS * MLPERF_GRADIENT_BYTES, mlperf_v11.outer_ring_delta_s(assumptions.outer_ring_statistic), 2, 4,
        outer_step_s(128, MK2_CLOCK_HZ, assumptions), outer_step_s(256, MK2_CLOCK_HZ, assumptions))


def all_reduce_s(ipu_bytes: list[float], replicas: int, domains: int, spec: IpuSpec, total_ipus: int,
                 assumptions: Assumptions) -> float:
    """The gradient all-reduce of one weight update: ``ipu_bytes`` per IPU of a replica, across
    ``replicas`` replicas spread over ``domains`` IPU-Link domains. Inside a domain the replicas'
    IPUs of each stage form a ring (all stages' rings run at once, the largest decides); between
    domains one ring carries every stage's gradient at the calibrated rate."""
    if replicas <= 1:
        return 0.0
    inner = replicas // domains
    t_inner = ring_all_reduce_s(max(ipu_bytes), inner, ring_link_bytes_per_s(spec, assumptions),
                                ring_step_s(inner, spec.clock_hz, assumptions))
    if domains == 1:
        return t_inner
    return t_inner + ring_all_reduce_s(sum(ipu_bytes), domains, outer_ring_bytes_per_s(assumptions),
                                       outer_step_s(total_ipus, spec.clock_hz, assumptions))


def norm_statistics(channels: int, span: int, spec: IpuSpec, assumptions: Assumptions) -> Cycles:
    """One cross-replica sum of a norm's two per-channel statistics over ``span`` replicas, in tile
    cycles: a ring of ``span`` IPUs, each step a compute set plus a global sync and its share of the
    bytes over the IPU-Links."""
    if span <= 1:
        return Cycles()
    steps = 2 * (span - 1)
    nbytes = 2 * channels * NORM_STAT_BYTES
    transfer = ring_all_reduce_s(nbytes, span, ring_link_bytes_per_s(spec, assumptions),
                                 global_sync_s(span, assumptions))
    return Cycles(exchange=transfer * spec.clock_hz + steps * assumptions.exchange_fixed_cycles,
                  sync=steps * assumptions.sync_cycles, compute_sets=steps)
