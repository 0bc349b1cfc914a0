"""Host input per weight update: the hosts' NICs as a rate bound, the copy into the tiles as time.

Two different things stand between the dataset and the tiles:

* **The hosts' NICs** (RoCE, ``MachineSpec.host_nic_bytes_per_s`` per host, at ``host_nic_efficiency``)
  fill host buffers in the background, ahead of the device: the loader prefetches and the stream
  callbacks hand over buffers that are ready. They bound the rate, not the step: an update can take no
  less than its images' NIC time, so the step is ``max(device time, NIC time)`` (``nic_s``), never
  their sum.
* **The copy from host buffers into the tiles** is a stream copy inside the program, at the IPU's host
  link rate (``IpuSpec.host_link_bytes_per_s``, PCIe Gen4, at ``host_link_efficiency``). Without IO
  tiles the compute tiles wait for it: it adds to the step (``copy_s``). With IO tiles and a schedule
  that lets them overlap (``overlaps``) it lands on the IO tiles while the others compute, and is a
  bound like the NIC.

ResNet-50's recipes set no IO tiles (their configs, benchmark commands and MLPerf v1.1 configs), the
G16 EfficientNet recipe sets 32. The efficiencies and the host link's rate are fields of
``ipu.cost.assumptions.Assumptions``.
"""

from __future__ import annotations

from ipu.cost.assumptions import Assumptions
from ipu.plan import IpuPlan
from ipu.precision import get_precision
from ipu.specs import PodSpec


def input_bytes_per_replica(plan: IpuPlan) -> float:
    """One weight update's input images for one replica (uint8 with 8-bit IO, else the compute type)."""
    pixel_bytes = 1 if plan.eight_bit_io else get_precision(plan.precision).activation_bytes
    return plan.gradient_accumulation * plan.image_elems * pixel_bytes


def nic_s(plan: IpuPlan, pod: PodSpec, assumptions: Assumptions) -> float:
    """Every replica's input of one update through the hosts' NICs."""
    rate = pod.host_bytes_per_s(plan.num_hosts) * assumptions.host_nic_efficiency
    return input_bytes_per_replica(plan) * plan.replicas / rate


def copy_s(plan: IpuPlan, pod: PodSpec, assumptions: Assumptions) -> float:
    """One replica's input of one update from host buffers into the tiles over the IPU's host link."""
    link = assumptions.chip_spec(pod.chip).host_link_bytes_per_s
    return input_bytes_per_replica(plan) / (link * assumptions.host_link_efficiency)


def overlaps(plan: IpuPlan) -> bool:
    """Whether IO tiles take the copy off the compute tiles' critical path (a single-IPU replica or
    the grouped schedule, ``ipu.io_tiles.io_overlaps``)."""
    return plan.num_io_tiles > 0 and (plan.ipus_per_replica == 1 or plan.schedule == "grouped")


def exposed_s(device_s: float, nic: float, copy: float, overlapped: bool) -> float:
    """Host IO time the step shows on top of ``device_s`` (everything else of the update).

    Overlapped: the copy and the NIC are both bounds, ``max(device, nic, copy) - device``. Not
    overlapped: the copy adds to the device time and the NIC bounds the sum,
    ``max(device + copy, nic) - device``.
    """
    if overlapped:
        return max(0.0, max(nic, copy) - device_s)
    return max(device_s + copy, nic) - device_s
