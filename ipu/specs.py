"""Hardware facts for the simulated IPUs, the machines that hold them and the PODs they form.

Every number carries its source. "ref §7" means ``shared/reference/efficientnet-and-ipu.md``
section 7, which quotes the primary source (datasheet, guide or paper). "Derived" marks
arithmetic on sourced inputs; "assumed" marks a modelling choice with no public figure behind it.
The POD shapes (IPUs, hosts, IPU-Link domains) come from ``poprun_py.systems``, the table the
launcher validates against; this module adds the chip and link facts on top of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from poprun_py.systems import SYSTEMS, SystemShape, get_system

KIB = 1024
GB = 1e9  # link and memory bandwidths are quoted in decimal units


@dataclass(frozen=True)
class IpuSpec:
    """One IPU chip.

    amp_*: accumulating matrix product unit rate (convolutions, matrix products).
    vector_*: rate of the tile's vector unit for everything else.
    """

    name: str
    tiles: int
    threads_per_tile: int
    memory_per_tile: int  # bytes of In-Processor-Memory per tile
    clock_hz: float
    amp_fp16_flops_per_cycle: int  # per tile, a multiply-add counts 2
    amp_fp32_flops_per_cycle: int
    vector_fp16_flops_per_cycle: int
    vector_fp32_flops_per_cycle: int
    exchange_bytes_per_s: float  # on-chip tile-to-tile exchange, whole chip
    ipu_links: int
    ipu_link_bytes_per_s: float  # all IPU-Links of one chip together
    host_link_bytes_per_s: float  # host <-> this IPU

    @property
    def memory_bytes(self) -> int:
        return self.tiles * self.memory_per_tile

    def peak_flops(self, half: bool) -> float:
        """Peak matrix-unit FLOP/s of the whole chip, float16 or float32."""
        per_cycle = self.amp_fp16_flops_per_cycle if half else self.amp_fp32_flops_per_cycle
        return self.tiles * per_cycle * self.clock_hz


# Mk1 GC2: 1216 tiles, 256 KiB/tile (304 MiB), 124.5 TFLOPS mixed, 31.1 TFLOPS FP32 (ref §7,
# Citadel microbenchmark notes). Clock 1.6 GHz is derived: 124.5e12 / (1216 x 64) = 1.60e9.
MK1_GC2 = IpuSpec(
    name="Mk1 GC2",
    tiles=1216,
    threads_per_tile=6,  # same barrel-threaded tile as Mk2 (ref §7 flashcards; assumed for Mk1)
    memory_per_tile=256 * KIB,
    clock_hz=1.6e9,  # derived, see above
    amp_fp16_flops_per_cycle=64,  # derived: 124.5e12 / (1216 * 1.6e9)
    amp_fp32_flops_per_cycle=16,  # derived: 31.1e12 / (1216 * 1.6e9)
    vector_fp16_flops_per_cycle=8,  # assumed: 4-wide half FMA
    vector_fp32_flops_per_cycle=4,  # assumed: 2-wide float FMA
    exchange_bytes_per_s=45e12,  # 45 TB/s (ref §7, Citadel notes)
    ipu_links=10,  # assumed equal to Mk2 (no primary figure in the reference)
    ipu_link_bytes_per_s=320 * GB,  # assumed equal to Mk2
    host_link_bytes_per_s=32 * GB,  # assumed: PCIe Gen4 x16 card shared by 2 IPUs
)

# Mk2 GC200: 1472 tiles, 6 threads, 900 MB (624 KiB/tile), 250 TFLOPS FP16, 62.4 TFLOPS FP32
# (ref §7: hexus, POD64 datasheet 3.994 PF FP32 / 64). Clock 1.33 GHz derived from
# 250e12 / (1472 x 128). "About 47 TB/s within an IPU" (Memory & Performance guide §2.1).
# 10 IPU-Links, 320 GB/s; host interface PCIe Gen4, 64 GB/s per IPU (ref §7 flashcards).
MK2_GC200 = IpuSpec(
    name="Mk2 GC200",
    tiles=1472,
    threads_per_tile=6,
    memory_per_tile=624 * KIB,
    clock_hz=1.33e9,
    amp_fp16_flops_per_cycle=128,  # 64 FP16 FMAs per tile per cycle (derived above)
    amp_fp32_flops_per_cycle=32,  # derived: 62.4e12 / (1472 * 1.33e9) = 31.9
    vector_fp16_flops_per_cycle=8,  # assumed: 4-wide half FMA
    vector_fp32_flops_per_cycle=4,  # assumed: 2-wide float FMA
    exchange_bytes_per_s=47e12,
    ipu_links=10,
    ipu_link_bytes_per_s=320 * GB,
    host_link_bytes_per_s=64 * GB,
)

# Bow IPU: the same 1472 tiles and 900 MB as Mk2 at 1.85 GHz, "+40 % performance"; Bow-2000 is
# 1.4 PF for 4 IPUs (ref §7: Bow-2000 datasheet, talent-republic). 1472 x 128 x 1.85e9 = 348.6
# TFLOPS, consistent with 1.4 PF / 4. Exchange scales with the clock (derived: 47 x 1.85/1.33).
BOW = IpuSpec(
    name="Bow",
    tiles=1472,
    threads_per_tile=6,
    memory_per_tile=624 * KIB,
    clock_hz=1.85e9,
    amp_fp16_flops_per_cycle=128,
    amp_fp32_flops_per_cycle=32,
    vector_fp16_flops_per_cycle=8,
    vector_fp32_flops_per_cycle=4,
    exchange_bytes_per_s=65e12,  # derived: 47e12 * 1.85 / 1.33
    ipu_links=10,
    ipu_link_bytes_per_s=320 * GB,  # same IPU-Fabric as M2000 (Bow-2000 datasheet, assumed)
    host_link_bytes_per_s=64 * GB,
)

CHIPS: dict[str, IpuSpec] = {"mk1": MK1_GC2, "mk2": MK2_GC200, "bow": BOW}


@dataclass(frozen=True)
class MachineSpec:
    """A 1U IPU machine: four IPUs behind an IPU-Gateway."""

    name: str
    chip: IpuSpec
    ipus: int
    gateway_bytes_per_s: float  # IPU-Fabric through the gateway
    gw_link_bytes_per_s: float  # GW-Links to other racks, whole machine
    host_nic_bytes_per_s: float  # RoCE host link of the machine
    streaming_memory_bytes: int
    power_w: float


# IPU-M2000: 4 x GC200, 1 PF FP16.16, IPU-Gateway 2.8 Tbps, 448 GB Streaming Memory at launch,
# 1.5 kW (ref §7: hexus, tech5.in, eenewseurope). GW-Link and host-NIC rates are assumed:
# 2 x 100 Gb/s each (not in the reference).
M2000 = MachineSpec(
    name="IPU-M2000",
    chip=MK2_GC200,
    ipus=4,
    gateway_bytes_per_s=2.8e12 / 8,
    gw_link_bytes_per_s=2 * 100e9 / 8,
    host_nic_bytes_per_s=2 * 100e9 / 8,
    streaming_memory_bytes=448 * 10**9,
    power_w=1500.0,
)

# Bow-2000: 4 x Bow, 1.4 PF, up to 256 GB Streaming Memory, 1.25 kW, "Host-Link - PCIe Gen4 RoCEv2
# NIC/SmartNIC" (ref §7, Bow-2000 datasheet). Fabric rates assumed equal to the M2000.
BOW_2000 = MachineSpec(
    name="Bow-2000",
    chip=BOW,
    ipus=4,
    gateway_bytes_per_s=2.8e12 / 8,
    gw_link_bytes_per_s=2 * 100e9 / 8,
    host_nic_bytes_per_s=2 * 100e9 / 8,
    streaming_memory_bytes=256 * 10**9,
    power_w=1250.0,
)

# Mk1 has no 1U machine: model a host with C2 cards, 2 IPUs per PCIe card (assumed).
MK1_SERVER = MachineSpec(
    name="C2 server",
    chip=MK1_GC2,
    ipus=2,
    gateway_bytes_per_s=64 * GB,
    gw_link_bytes_per_s=0.0,
    host_nic_bytes_per_s=32 * GB,
    streaming_memory_bytes=0,
    power_w=300.0,
)

MACHINES: dict[str, MachineSpec] = {"mk1": MK1_SERVER, "mk2": M2000, "bow": BOW_2000}


@dataclass(frozen=True)
class PodSpec:
    """An IPU-POD: the launcher's ``SystemShape`` plus the machines it is built from.

    IPUs inside one IPU-Link domain (one POD64 rack at most) talk over IPU-Links; domains talk
    over the machines' GW-Links (POD128 = 2 POD64s with GW-Links cross-connected, ref §7).
    """

    shape: SystemShape
    machine: MachineSpec

    @property
    def name(self) -> str:
        return self.shape.name

    @property
    def chip(self) -> IpuSpec:
        return self.machine.chip

    @property
    def num_ipus(self) -> int:
        return self.shape.num_ipus

    @property
    def num_ilds(self) -> int:
        return self.shape.num_ilds

    @property
    def ipus_per_ild(self) -> int:
        return self.shape.num_ipus // self.shape.num_ilds

    @property
    def num_machines(self) -> int:
        return -(-self.shape.num_ipus // self.machine.ipus)

    @property
    def gw_link_bytes_per_s(self) -> float:
        """GW-Link bandwidth leaving one IPU-Link domain (all its machines together)."""
        return self.machine.gw_link_bytes_per_s * self.num_machines / self.num_ilds

    def host_bytes_per_s(self, num_hosts: int) -> float:
        """Host-to-POD input bandwidth with ``num_hosts`` hosts, each with one machine's NIC rate."""
        if not 1 <= num_hosts <= self.shape.max_hosts:
            raise ValueError(
                f"{self.name} takes 1 to {self.shape.max_hosts} hosts, not {num_hosts}: "
                f"change num_hosts"
            )
        return num_hosts * self.machine.host_nic_bytes_per_s


def get_chip(name: str) -> IpuSpec:
    """Look a chip up by short name: ``mk1``, ``mk2`` or ``bow`` (case-insensitive)."""
    key = name.strip().lower()
    if key not in CHIPS:
        raise ValueError(f"unknown IPU {name!r}: choose one of {', '.join(CHIPS)} (for example chip='mk2')")
    return CHIPS[key]


def get_pod(system: str, chip: str = "mk2") -> PodSpec:
    """The POD called ``system`` (``POD16``...) built from ``chip`` machines."""
    get_chip(chip)
    return PodSpec(shape=get_system(system), machine=MACHINES[chip.strip().lower()])


PODS: dict[str, PodSpec] = {name: get_pod(name) for name in SYSTEMS}


def smallest_system(num_ipus: int) -> str:
    """The smallest POD that holds ``num_ipus`` IPUs; ``ValueError`` naming the largest when none does."""
    for name, pod in sorted(PODS.items(), key=lambda kv: kv[1].num_ipus):
        if pod.num_ipus >= num_ipus:
            return name
    raise ValueError(f"{num_ipus} IPUs exceed the largest POD ({max(p.num_ipus for p in PODS.values())} IPUs)")
