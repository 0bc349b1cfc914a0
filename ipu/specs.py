"""Hardware facts for the simulated IPUs, the machines that hold them and the PODs they form.

Every number carries its source: ``docs/sources.md`` section 4 lists each with its public
source (datasheet, guide, paper or article). "Derived" marks
arithmetic on sourced inputs; "assumed" marks a modelling choice with no public figure behind it.
The POD shapes (IPUs, hosts, IPU-Link domains) come from ``poprun_py.systems``, the table the
launcher validates against; this module adds the chip and link facts on top of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from poprun_py.systems import SYSTEMS, SystemShape, get_system

KIB = 1024
GB = 1e9  # link and memory bandwidths are quoted in decimal units


@dataclass(frozen=True)
class IpuSpec:
    """One IPU chip: its tiles, clock, accumulating matrix product (AMP) unit and exchange.

    The AMP shape follows poplibs' planner (``lib/poplin/ConvVertexType.cpp``,
    ``ConvModel.cpp``): a tile has ``conv_units_*`` conv units, each a chain of
    ``AMP_CHAIN_LENGTH`` engines fed ``conv_load_elems_*`` input elements a cycle, so one
    unit holds chain x load = 16 half (8 float) weights and a tile does units x load
    multiply-adds a cycle. The unit count depends on the input and partials types.
    """

    name: str
    tiles: int
    threads_per_tile: int  # worker contexts; a worker issues every threads_per_tile-th cycle
    memory_per_tile: int  # bytes of In-Processor-Memory per tile
    clock_hz: float
    conv_units_half_partials: int  # half in, half partials
    conv_units_float_partials: int  # half in, float partials
    conv_units_float: int  # float in, float partials
    coeff_load_bytes_per_cycle: int  # weights into the conv units (128-bit load path)
    exchange_bytes_per_cycle: int  # what one tile receives per cycle over the exchange
    tiles_per_exchange_bus: int  # tiles sharing a bus (a broadcast reaches both at once)
    memory_bytes_per_s: float  # quoted on-chip bandwidth; see "exchange" in the module doc
    ipu_links: int
    ipu_link_bytes_per_s: float  # all IPU-Links of one chip together
    host_link_bytes_per_s: float  # host <-> this IPU

    @property
    def memory_bytes(self) -> int:
        return self.tiles * self.memory_per_tile

    @property
    def tile_view(self) -> IpuSpec:
        """This chip with only what decides cycles (no name, clock or links): Mk2 and Bow plan alike."""
        return replace(self, name="tile", clock_hz=1.0, memory_bytes_per_s=0.0, ipu_links=0,
                       ipu_link_bytes_per_s=0.0, host_link_bytes_per_s=0.0)

    def conv_units(self, half_inputs: bool, half_partials: bool) -> int:
        if not half_inputs:
            return self.conv_units_float
        return self.conv_units_half_partials if half_partials else self.conv_units_float_partials

    @staticmethod
    def conv_load_elems(half_inputs: bool) -> int:
        """Input elements a conv unit takes per cycle: 64 bits (poplibs TileConstants.hpp)."""
        return CONV_LOAD_ELEMS_HALF if half_inputs else CONV_LOAD_ELEMS_FLOAT

    def amp_macs_per_cycle(self, half_inputs: bool, half_partials: bool = True) -> int:
        """Multiply-adds per tile per cycle of the AMP (ConvModel.cpp getMaxMACsPerCyclePerTile)."""
        return self.conv_units(half_inputs, half_partials) * self.conv_load_elems(half_inputs)

    @property
    def amp_fp16_flops_per_cycle(self) -> int:
        return 2 * self.amp_macs_per_cycle(True, True)

    @property
    def amp_fp32_flops_per_cycle(self) -> int:
        return 2 * self.amp_macs_per_cycle(False)

    def peak_flops(self, half: bool) -> float:
        """Peak matrix-unit FLOP/s of the whole chip, float16 (half partials) or float32."""
        per_cycle = self.amp_fp16_flops_per_cycle if half else self.amp_fp32_flops_per_cycle
        return self.tiles * per_cycle * self.clock_hz


# AMP geometry shared by every chip (poplibs): a conv unit chains 4 engines
# (ConvVertexType.cpp: SLIC throws unless getConvUnitMaxPipelineDepth is 4; the 1x1 vertex test
# ConvPartial1x1Out.cpp hard-codes inChansPerGroup = 4 x load elements) and loads 64 bits a cycle:
# 4 half or 2 float elements (lib/poplibs_support/TileConstants.hpp CONV_UNIT_INPUT_LOAD_ELEMS_*).
AMP_CHAIN_LENGTH = 4
CONV_LOAD_ELEMS_HALF = 4
CONV_LOAD_ELEMS_FLOAT = 2
# Exchange: 4 bytes per tile per cycle is what Poplar's planners charge (poplibs ConvModel.cpp,
# ReductionPlan.cpp and PoolPlan.cpp call Target::getExchangeBytesPerCycle(); the first PoolPlan.cpp,
# commit a1c3b66 of 2018, hard-coded ``exchangeBytesPerCycle = 4``). The "47 TB/s" of the Memory &
# Performance guide (and 45 TB/s for Mk1) is not that: it equals tiles x 24 B/cycle x clock
# (1472 x 24 x 1.33e9 = 47.0e12; 1216 x 24 x 1.6e9 = 46.7e12), two 64-bit loads and a 64-bit store
# per tile per cycle, i.e. the tiles' memory bandwidth (derived; the guide gives no breakdown). The
# cost model uses the planners' 4 B/cycle/tile: 7.8 TB/s per Mk2 when every tile receives.
EXCHANGE_BYTES_PER_CYCLE = 4
MEMORY_BYTES_PER_CYCLE = 24  # derived, see above

# Mk1 GC2: 1216 tiles, 256 KiB/tile (304 MiB), 124.5 TFLOPS mixed, 31.1 TFLOPS FP32 (docs/sources.md §4,
# Citadel microbenchmark notes). Clock 1.6 GHz is derived: 124.5e12 / (1216 x 64) = 1.60e9.
# Conv units: 8 (16 exist "only on IPU2 / IPU21", poplibs tests/poplin/codelets/ConvPartial1x1Out.cpp),
# so 8 x 4 = 32 half MACs = 64 FLOP/cycle, 124.5 TFLOPS; float: 31.1e12 / (1216 x 1.6e9 x 2 x 2) = 4 units.
MK1_GC2 = IpuSpec(
    name="Mk1 GC2",
    tiles=1216,
    threads_per_tile=6,  # same barrel-threaded tile as Mk2 (docs/sources.md §4 flashcards; assumed for Mk1)
    memory_per_tile=256 * KIB,
    clock_hz=1.6e9,  # derived, see above
    conv_units_half_partials=8,
    conv_units_float_partials=8,
    conv_units_float=4,  # derived from 31.1 TFLOPS FP32
    coeff_load_bytes_per_cycle=16,  # assumed equal to Mk2
    exchange_bytes_per_cycle=EXCHANGE_BYTES_PER_CYCLE,
    tiles_per_exchange_bus=1,  # assumed: no shared exchange bus on Mk1
    memory_bytes_per_s=45e12,  # 45 TB/s (docs/sources.md §4, Citadel notes)
    ipu_links=10,  # assumed equal to Mk2 (no primary figure in the reference)
    ipu_link_bytes_per_s=320 * GB,  # assumed equal to Mk2
    host_link_bytes_per_s=32 * GB,  # assumed: PCIe Gen4 x16 card shared by 2 IPUs
)

# Mk2 GC200: 1472 tiles, 6 threads, 900 MB (624 KiB/tile), 250 TFLOPS FP16, 62.4 TFLOPS FP32
# (docs/sources.md §4: hexus, POD64 datasheet 3.994 PF FP32 / 64). Clock 1.33 GHz derived from
# 250e12 / (1472 x 128). "About 47 TB/s within an IPU" (Memory & Performance guide §2.1).
# 10 IPU-Links, 320 GB/s; host interface PCIe Gen4, 64 GB/s per IPU (docs/sources.md §4 flashcards).
# Conv units: 16 with half partials ("On IPU2 with half inputs we need to enable 8 engines config
# as well", ConvVertexType.cpp): 16 x 4 = 64 MACs = 128 FLOP/cycle, 250 TFLOPS. Half inputs with
# float partials take the 8-unit code path (PerformanceEstimation.hpp: "half activations, half
# partials and 16 conv units is = half activations, float partials and 8 conv units"): 125 TFLOPS
# (derived; no datasheet figure). Float: 8 units x 2 = 16 MACs, 62.4 TFLOPS (and Bow's gc-flops
# reports 87.1 TFLOPS FP32 at 1850 MHz = 1472 x 32 x 1.85e9, Graphcore command-line tools docs §6).
MK2_GC200 = IpuSpec(
    name="Mk2 GC200",
    tiles=1472,
    threads_per_tile=6,
    memory_per_tile=624 * KIB,
    clock_hz=1.33e9,
    conv_units_half_partials=16,
    conv_units_float_partials=8,
    conv_units_float=8,
    coeff_load_bytes_per_cycle=16,  # assumed: a 128-bit load; poplibs halves it unless use128BitConvUnitLoad
    exchange_bytes_per_cycle=EXCHANGE_BYTES_PER_CYCLE,
    tiles_per_exchange_bus=2,  # poplibs ExchangeEstimator.hpp "super tile"; count assumed 2
    memory_bytes_per_s=47e12,
    ipu_links=10,
    ipu_link_bytes_per_s=320 * GB,
    host_link_bytes_per_s=64 * GB,
)

# Bow IPU: the same 1472 tiles and 900 MB as Mk2 at 1.85 GHz, "+40 % performance"; Bow-2000 is
# 1.4 PF for 4 IPUs (docs/sources.md §4: Bow-2000 datasheet, talent-republic). 1472 x 128 x 1.85e9 = 348.6
# TFLOPS, consistent with 1.4 PF / 4. Same tile as Mk2: per-cycle rates equal, the clock differs.
BOW = IpuSpec(
    name="Bow",
    tiles=1472,
    threads_per_tile=6,
    memory_per_tile=624 * KIB,
    clock_hz=1.85e9,
    conv_units_half_partials=16,
    conv_units_float_partials=8,
    conv_units_float=8,
    coeff_load_bytes_per_cycle=16,
    exchange_bytes_per_cycle=EXCHANGE_BYTES_PER_CYCLE,
    tiles_per_exchange_bus=2,
    memory_bytes_per_s=1472 * MEMORY_BYTES_PER_CYCLE * 1.85e9,  # derived, 65 TB/s
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
# 1.5 kW (docs/sources.md §4: hexus, tech5.in, eenewseurope). GW-Link and host-NIC rates are assumed:
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
# NIC/SmartNIC" (docs/sources.md §4, Bow-2000 datasheet). Fabric rates assumed equal to the M2000.
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
    over the machines' GW-Links (POD128 = 2 POD64s with GW-Links cross-connected, docs/sources.md §4).
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
