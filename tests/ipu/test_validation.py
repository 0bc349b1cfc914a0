"""The validation rows: each component against its own figure, no EfficientNet figure anywhere."""

import pytest

from ipu.cost import mlperf_v11
from ipu.cost.validation import PUBLISHED, components, format_components


def test_components_carry_their_own_figures_and_say_when_none_was_found():
    rows = {c.component: c for c in components()}
    exchange = rows["exchange, all tiles receiving (Mk2)"]
    assert exchange.model == pytest.approx(1472 * 4 * 1.33e9 / 1e12) and exchange.public == 8.0
    outer = rows["all-reduce between IPU-Link domains, POD256 - POD128 step (Mk2)"]
    assert outer.calibration and outer.ratio == pytest.approx(1.0, rel=1e-9)
    assert outer.public == pytest.approx(mlperf_v11.outer_ring_delta_s() * 1e3)
    missing = [c for c in rows.values() if c.public is None]
    assert missing and all(c.ratio is None and c.source.startswith("not found") for c in missing)
    table = format_components(list(rows.values()))
    assert "1.00 (calibrated)" in table and table.count("not found") == len(missing)


def test_only_resnet_figures_are_compared():
    assert all(f.preset.startswith("resnet50") for f in PUBLISHED)
    mlperf = [f for f in PUBLISHED if f.source == mlperf_v11.SOURCE]
    assert [f.preset for f in mlperf] == [f"resnet50-mlperf-pod{n}" for n in (16, 64, 128, 256)]
