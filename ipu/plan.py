"""An IPU execution plan: how one training configuration maps onto a POD, plus named presets.

The presets are Graphcore's EfficientNet-B4 configurations from ``graphcore/examples`` @ 32fc7bd
(SDK 2.4) and ``graphcore-research`` (docs/sources.md §1, §2), and its public ResNet-50 v1.5
training recipe (``graphcore/examples`` @ 09b7c67, ``vision/cnns/tensorflow1/training/configs.yml``),
the second workload the cost model is checked against (``ipu/cost/validation.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ipu.pipeline.schedule import SCHEDULES, check_device_mapping
from ipu.pipeline.split import check_gradient_accumulation, check_pipeline_splits
from ipu.precision import get_precision
from ipu.specs import PodSpec, get_pod
from poprun_py.systems import is_power_of_two

IMAGENET_TRAIN_IMAGES = 1_281_167  # docs/sources.md §8
OPTIMIZER_STATE_SLOTS = {"sgd": 0, "momentum": 1, "lars": 1, "rmsprop": 2, "adam": 2}


@dataclass(frozen=True)
class Workload:
    """What a layer profile leaves out about a model: its activation and norm, which the cost model needs
    (``ipu.cost.layers.workload_for`` derives them from a built-in model's name; an imported graph's come
    from its nodes)."""

    activation: str = "swish"
    norm: str = "group"
    norm_groups: int = 4
    drop_connect: bool = True
    stable_norm: bool = True  # two-pass statistics (the EfficientNet recipe forces stable_norm on)


@dataclass(frozen=True)
class IpuPlan:
    """Everything the memory and cost models need about one run (no training state)."""

    model: str = "efficientnet-b4-gn"
    model_overrides: tuple[tuple[str, object], ...] = ()  # passed to models.build_model
    image_size: int = 380
    image_channels: int = 3
    num_classes: int = 1000
    micro_batch: int = 3
    gradient_accumulation: int = 1
    replicas: int = 1
    ipus_per_replica: int = 1
    pipeline_splits: tuple[str, ...] = ()  # empty with several IPUs: balance automatically
    device_mapping: tuple[int, ...] = ()  # IPU of each pipeline stage; () = one stage per IPU
    schedule: str = "grouped"
    precision: str = "16.16"
    half_partials: bool = True  # float16 partial sums in convolutions (the recipes' enable_half_partials)
    recompute: bool = False
    recompute_until: str = ""  # single-IPU replica: the block where recomputation stops ("": recompute all)
    norm_span: int = 1  # replicas whose batch norms share statistics (the recipes' BN_span)
    available_memory_proportion: float = 0.6  # poplibs' default (lib/poplin/ConvOptions.hpp)
    num_io_tiles: int = 0
    prefetch_micro_batches: int = 3
    eight_bit_io: bool = True
    optimizer: str = "lars"
    system: str = "POD16"
    chip: str = "mk2"
    num_hosts: int = 1
    device_iterations: int = 1
    dataset_images: int = IMAGENET_TRAIN_IMAGES
    epochs: float = 350.0
    workload: Workload | None = None  # an imported graph's; None: the built-in model's (workload_for)

    def __post_init__(self) -> None:
        get_precision(self.precision)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}: choose one of {', '.join(SCHEDULES)}")
        if self.optimizer not in OPTIMIZER_STATE_SLOTS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}: choose one of {', '.join(OPTIMIZER_STATE_SLOTS)}")
        if not 0.0 < self.available_memory_proportion <= 1.0:
            raise ValueError(
                f"available_memory_proportion must be in (0, 1], got {self.available_memory_proportion} "
                f"(a reasonable range is [0.05, 0.6])"
            )
        for name in ("micro_batch", "gradient_accumulation", "replicas", "ipus_per_replica", "device_iterations",
                     "norm_span"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        _check_power_of_two("replicas", self.replicas)
        _check_power_of_two("ipus_per_replica", self.ipus_per_replica)
        if self.device_mapping:
            check_device_mapping(self.device_mapping, len(self.device_mapping), self.schedule)
            if max(self.device_mapping) >= self.ipus_per_replica:
                raise ValueError(
                    f"device_mapping {list(self.device_mapping)} uses IPU {max(self.device_mapping)} but a replica "
                    f"has {self.ipus_per_replica} IPUs (0..{self.ipus_per_replica - 1}): raise ipus_per_replica"
                )
        if self.norm_span > 1 and (self.replicas % self.norm_span or not is_power_of_two(self.norm_span)):
            raise ValueError(f"norm_span {self.norm_span} must be a power of two dividing the {self.replicas} replicas "
                             f"(batch norm statistics are shared by groups of neighbouring replicas)")
        if self.recompute_until and (not self.recompute or self.num_stages > 1):
            raise ValueError(f"recompute_until {self.recompute_until!r} names where a single-IPU replica's "
                             f"recomputation stops: it needs recompute=True and one pipeline stage (a pipeline's "
                             f"last stage is never recomputed); drop recompute_until")
        check_pipeline_splits(self.pipeline_splits, self.num_stages)
        check_gradient_accumulation(self.gradient_accumulation, self.num_stages)
        pod = self.pod
        if self.total_ipus > pod.num_ipus:
            raise ValueError(
                f"{self.replicas} replicas x {self.ipus_per_replica} IPUs = {self.total_ipus} IPUs do not "
                f"fit {pod.name} ({pod.num_ipus} IPUs): use a larger system or fewer replicas"
            )
        pod.host_bytes_per_s(self.num_hosts)  # validates num_hosts

    @property
    def pod(self) -> PodSpec:
        return get_pod(self.system, self.chip)

    @property
    def num_stages(self) -> int:
        """Pipeline stages: one per ``device_mapping`` entry, else one per IPU."""
        return len(self.device_mapping) if self.device_mapping else self.ipus_per_replica

    @property
    def image_elems(self) -> int:
        """Elements of one micro-batch of input images."""
        return self.micro_batch * self.image_size**2 * self.image_channels

    @property
    def total_ipus(self) -> int:
        return self.replicas * self.ipus_per_replica

    @property
    def global_batch(self) -> int:
        """Images per weight update: micro-batch x GA x replicas (docs/sources.md §1.3)."""
        return self.micro_batch * self.gradient_accumulation * self.replicas

    @property
    def overrides(self) -> dict[str, object]:
        return dict(self.model_overrides)


def optimizer_state(name: str, momentum: float = 0.0) -> str:
    """The optimizer-state model (``OPTIMIZER_STATE_SLOTS`` key) of a ``models.optim`` rule name."""
    if name in ("sgd", "nesterov"):
        return "momentum" if momentum > 0 else "sgd"
    return {"adamw": "adam"}.get(name, name)


def _check_power_of_two(name: str, value: int) -> None:
    if not is_power_of_two(value):
        raise ValueError(f"{name} must be a power of two on an IPU-POD (docs/sources.md §4), got {value}")


# G16 EfficientNet-B4 with LARS, 2 IPUs per replica split at block4a, 16.16 with stochastic
# rounding, recomputation, grouped schedule, AMP 0.4, 32 IO tiles, prefetch 3, 8-bit IO (docs/sources.md §1.2).
G16_B4 = IpuPlan(
    model="efficientnet-b4-gn",
    model_overrides=(("group_size", 16), ("expand_ratio", 4)),
    image_size=380,
    micro_batch=3,
    ipus_per_replica=2,
    pipeline_splits=("block4a",),
    gradient_accumulation=256,
    replicas=8,
    schedule="grouped",
    precision="16.16",
    recompute=True,
    available_memory_proportion=0.4,
    num_io_tiles=32,
    prefetch_micro_batches=3,
    eight_bit_io=True,
    optimizer="lars",
    device_iterations=13,  # 208 updates per epoch / --logs-per-epoch 16 (README_Benchmarks POD64 command)
)

# Graphcore's public ResNet-50 v1.5 training recipe, graphcore/examples @ 09b7c67
# vision/cnns/tensorflow1/training/configs.yml ``resnet50_mlperf_pod16_bs20`` (the batch 1,920 of the
# published Bow Pod16 throughput): 16 replicas of 1 IPU, micro-batch 20, GA 6, recomputation
# checkpoints instead of pipelining (Sequential schedule, recompute, ``pipeline_splits`` at
# stage1/unit1, stage1/unit3, stage2/unit1, stage2/unit3, stage3/unit1 and stage3/unit4 relu: the segment
# after the last checkpoint, from layer3.4 on, is the pipeline's last stage and is not recomputed),
# batch norm with ``BN_span: 2`` (statistics over 2 replicas), half partials, 8-bit IO, momentum SGD,
# AMP 0.15, 40 epochs, 5 logs per epoch (667 updates / 5 = 133 per host call); precision 16.16 as in the
# published table. No IO tiles are set.
RESNET50_POD16 = IpuPlan(
    model="resnet50",
    image_size=224,
    micro_batch=20,
    gradient_accumulation=6,
    replicas=16,
    ipus_per_replica=1,
    schedule="sequential",
    precision="16.16",
    recompute=True,
    recompute_until="layer3.4",
    norm_span=2,
    available_memory_proportion=0.15,
    num_io_tiles=0,
    eight_bit_io=True,
    optimizer="momentum",
    system="POD16",
    device_iterations=133,
    epochs=40.0,
)
# Graphcore's MLPerf Training v1.1 ResNet-50 submission on Mk2 (mlcommons/training_results_v1.1, configs.yml
# ``mk2_resnet50_mlperf_pod*``; the logs, ipu.cost.evidence.mlperf_v11, record global batch, GA and BN span): micro-batch
# 20 on every POD, LARS, the checkpoints and BN_span of the recipe above, AMP 0.15 (POD16) or 0.14; 5 logs per
# epoch on POD16 (400 updates / 5 = 80 per host call), ``batches_per_step: 100000`` on the larger PODs.
RESNET50_MLPERF = replace(RESNET50_POD16, gradient_accumulation=10, optimizer="lars", device_iterations=80,
                          epochs=38.0)

# Per-POD replicas and GA keep the global batch at 6144 (docs/sources.md §1.3); hosts as documented (POD16 1,
# POD64 4) or the most the system takes (POD128 8 as in the PopRun example, POD256 16).
PRESETS: dict[str, IpuPlan] = {
    "g16-b4-pod4": replace(G16_B4, system="POD4", replicas=2, gradient_accumulation=160),
    "g16-b4-pod16": replace(G16_B4, system="POD16", replicas=8, gradient_accumulation=256),
    "g16-b4-pod64": replace(G16_B4, system="POD64", replicas=32, gradient_accumulation=64, num_hosts=4),
    "g16-b4-pod128": replace(G16_B4, system="POD128", replicas=64, gradient_accumulation=32, num_hosts=8),
    "g16-b4-pod256": replace(G16_B4, system="POD256", replicas=128, gradient_accumulation=16, num_hosts=16),
    # The G1 (depthwise) baseline: 4 IPUs per replica, micro-batch 3, GA 64, 4 replicas = 768,
    # RMSprop, 16.32, splits [block2b, block4b, block6c], AMP 0.15 (docs/sources.md §1.4).
    "g1-b4-4ipu": IpuPlan(
        model="efficientnet-b4-gn",
        model_overrides=(("group_size", 1), ("expand_ratio", 6)),
        image_size=380,
        micro_batch=3,
        ipus_per_replica=4,
        pipeline_splits=("block2b", "block4b", "block6c"),
        gradient_accumulation=64,
        replicas=4,
        schedule="grouped",
        precision="16.32",
        recompute=True,
        available_memory_proportion=0.15,
        num_io_tiles=0,
        optimizer="rmsprop",
        system="POD16",
    ),
    "resnet50-pod16": RESNET50_POD16,
    # resnet50_mlperf_pod64_bs20: 64 replicas x 20 x GA 2 = 2,560 (the published Bow Pod64 batch),
    # AMP 0.145, 41 epochs, device_iterations 100000 as set in the config; 4 hosts.
    "resnet50-pod64": replace(RESNET50_POD16, system="POD64", replicas=64, gradient_accumulation=2,
                              available_memory_proportion=0.145, num_hosts=4, device_iterations=100000,
                              epochs=41.0),
    # The published Bow Pod256 batch 10,240 is 256 replicas x 20 x GA 2: the pod64 config on 256
    # replicas (derived; no pod256 config is in the repository), 16 hosts.
    "resnet50-pod256": replace(RESNET50_POD16, system="POD256", replicas=256, gradient_accumulation=2,
                               available_memory_proportion=0.145, num_hosts=16, device_iterations=100000,
                               epochs=41.0),
    # The MLPerf v1.1 runs (Mk2): POD16 16 x 20 x GA 10 = 3,200; POD64 64 x 20 x 3 = 3,840; POD128 128 x 20 x 2 =
    # 5,120; POD256 256 x 20 x 2 = 10,240; 38 epochs (the POD16 run's 28.3 minutes); hosts as above.
    "resnet50-mlperf-pod16": RESNET50_MLPERF,
    "resnet50-mlperf-pod64": replace(RESNET50_MLPERF, system="POD64", replicas=64, gradient_accumulation=3,
                                     available_memory_proportion=0.14, num_hosts=4, device_iterations=100000),
    "resnet50-mlperf-pod128": replace(RESNET50_MLPERF, system="POD128", replicas=128, gradient_accumulation=2,
                                      available_memory_proportion=0.14, num_hosts=8, device_iterations=100000),
    "resnet50-mlperf-pod256": replace(RESNET50_MLPERF, system="POD256", replicas=256, gradient_accumulation=2,
                                      available_memory_proportion=0.14, num_hosts=16, device_iterations=100000),
}


def get_preset(name: str) -> IpuPlan:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def load_profile(plan: IpuPlan) -> list:
    """The model's ``list[LayerProfile]`` at the plan's micro-batch and image size.

    Uses the numerics engine's contract ``models.build_model(name, num_classes, **overrides)
    .profile(batch_size)``; the image size is passed as the ``resolution`` override. Profiles are
    cached per model, overrides, image size and micro-batch (the PODs of a recipe share one).
    """
    key = (plan.model, repr(plan.model_overrides), plan.image_size, plan.num_classes, plan.micro_batch)
    if key not in _PROFILES:  # keyed by repr: override values may be lists (dense-mnist's hidden sizes)
        from models import build_model

        if len(_PROFILES) >= 16:
            _PROFILES.pop(next(iter(_PROFILES)))
        model = build_model(plan.model, plan.num_classes, resolution=plan.image_size, **dict(plan.model_overrides))
        _PROFILES[key] = tuple(model.profile(plan.micro_batch))
    return list(_PROFILES[key])


_PROFILES: dict[tuple, tuple] = {}


# Published end-to-end figures to compare predictions with (docs/sources.md §1.1): EfficientNet-B4 trained on
# IPU-POD256 in 1.8 hours (MLPerf v1.1 blog, read through a garbled mirror; the blog's opening says
# "less than two hours" on POD128/POD256). Assumes the recipe's 350 epochs at 380 pixels.
# The run was on Mk2 IPU-PODs (December 2021; Bow was announced in March 2022): only Mk2 predictions
# are compared with it.
PUBLISHED_HOURS_TO_TRAIN = {"g16-b4-pod256": 1.8}
PUBLISHED_CHIP = "mk2"
