"""Public measurements of IPU throughput to check the cost model against, with their sources.

The second workload is ResNet-50 v1.5 trained with Graphcore's public recipe (``ipu.plan``
presets ``resnet50-*``). Figures were found independently of the model's constants and none
was used to set one. Graphcore's published EfficientNet throughputs are deliberately absent:
they are the independent test of the model, and only the 1.8 h time to train
(``PUBLISHED_HOURS_TO_TRAIN``) is compared, by ``poprun-ipu predict``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ipu.cost.prediction import predict
from ipu.plan import get_preset, load_profile
from ipu.specs import get_chip

BOW_TABLE = ("Graphcore performance results, Bow platforms table (graphcore.cn/performance-results): "
             "ResNet-50 v1.5, TensorFlow1, Pre-SDK2.5, ImageNet2012, 16.16")
MLPERF_BLOG = ("Krell, Liu, Menage, Bogdanski, 'Accelerating ResNet-50 Training on the IPU for MLPerf', "
               "Graphcore blog, 17 Jan 2022 (MLPerf Training v1.1, IPU-POD16)")


@dataclass(frozen=True)
class PublishedFigure:
    preset: str
    chip: str
    quantity: str  # "images/s" or "minutes" (time to train the preset's epochs)
    value: float
    source: str
    note: str = ""


PUBLISHED: tuple[PublishedFigure, ...] = (
    PublishedFigure("resnet50-pod16", "bow", "images/s", 42_029, BOW_TABLE, "Bow Pod16, batch 1,920"),
    PublishedFigure("resnet50-pod64", "bow", "images/s", 145_287, BOW_TABLE, "Bow Pod64, batch 2,560"),
    PublishedFigure("resnet50-pod256", "bow", "images/s", 425_514, BOW_TABLE, "Bow Pod256, batch 10,240"),
    PublishedFigure("resnet50-mlperf-pod16", "mk2", "images/s", 30_000, MLPERF_BLOG,
                    "\"30k images per second throughput\""),
    PublishedFigure("resnet50-mlperf-pod16", "mk2", "minutes", 28.3, MLPERF_BLOG,
                    "38 epochs to 75.9 %; includes evaluation and start-up, which the model does not"),
)

# A single-operation check of the matrix-unit constants: Graphcore's gc-flops tool reports
# "Flops per IPU (FP32): 87.1078 teraFLOPS" at "IPU clock speed: 1850 MHz" on a Bow IPU
# (Graphcore command-line tools documentation, gc-flops, section 6).
GC_FLOPS_BOW_FP32 = 87.1078e12


@dataclass(frozen=True)
class Comparison:
    figure: PublishedFigure
    predicted: float
    predicted_without_host_io: float  # the same prediction with host IO fully hidden

    @property
    def ratio(self) -> float:
        """Predicted / published (above 1: the model is optimistic for throughput)."""
        if self.figure.quantity == "minutes":
            return self.figure.value / self.predicted
        return self.predicted / self.figure.value


def compare(figure: PublishedFigure) -> Comparison:
    plan = replace(get_preset(figure.preset), chip=figure.chip)
    p = predict(plan, load_profile(plan))
    hidden = p.step_time_s - p.breakdown["host_io"]
    if figure.quantity == "minutes":
        return Comparison(figure, p.time_to_train_s() / 60, p.time_to_train_s() / 60 * hidden / p.step_time_s)
    return Comparison(figure, p.images_per_s, plan.global_batch / hidden)


def comparisons(chip: str | None = None) -> list[Comparison]:
    return [compare(f) for f in PUBLISHED if chip is None or f.chip == chip]


def fp32_peak_check() -> tuple[float, float]:
    """(model's Bow FP32 matrix peak, gc-flops measurement) in FLOP/s."""
    return get_chip("bow").peak_flops(half=False), GC_FLOPS_BOW_FP32


def format_comparisons(rows: list[Comparison]) -> str:
    lines = ["| preset | chip | quantity | predicted | predicted, host IO hidden | published | ratio | source |",
             "|---|---|---|---|---|---|---|---|"]
    for c in rows:
        f = c.figure
        fmt = "{:,.0f}" if f.quantity == "images/s" else "{:.1f}"
        lines.append(f"| `{f.preset}` | {f.chip} | {f.quantity} | {fmt.format(c.predicted)} | "
                     f"{fmt.format(c.predicted_without_host_io)} | {fmt.format(f.value)} | {c.ratio:.2f} | "
                     f"{f.note}; {f.source} |")
    model, measured = fp32_peak_check()
    lines.append(f"| matrix-unit FP32 peak | bow | FLOP/s | {model / 1e12:.1f} T | | {measured / 1e12:.1f} T | "
                 f"{model / measured:.2f} | gc-flops on a Bow IPU at 1850 MHz (Graphcore command-line tools docs) |")
    return "\n".join(lines)
