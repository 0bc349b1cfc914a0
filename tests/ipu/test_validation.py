"""The validation rows: each component against its own figure, no EfficientNet figure anywhere."""

import pytest

from ipu.cost import jia2019, mlperf_v11
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


JIA_ROWS = ("tile memory, aggregate (Mk1)", "tile memory, read + write per tile per cycle (Mk1)",
            "IPU-Link rate per link and direction (Mk1)", "IPU-Links per chip (Mk1)",
            "on-chip point-to-point latency, full load over no load (Mk1)",
            "IPU-Link point-to-point latency, full load over no load (Mk1)")


def test_jia_rows_name_their_secondary_source_and_carry_a_ratio():
    rows = {c.component: c for c in components()}
    for name in JIA_ROWS:
        row = rows[name]
        assert row.model is not None and row.public is not None and row.ratio == pytest.approx(row.model / row.public)
        assert "Jia et al. 2019 ch. " in row.source and "(secondary: \"" in row.source and "https://" in row.source
    assert rows["IPU-Link point-to-point latency, full load over no load (Mk1)"].public == \
        jia2019.IPU_LINK_LATENCY_LOADED_OVER_IDLE_MIN.value
    figures = [v for v in vars(jia2019).values() if isinstance(v, jia2019.JiaFigure)]
    assert figures and not any(f.primary for f in figures)


def test_jia_components_not_found_stay_marked_as_such():
    rows = {c.component: c for c in components()}
    for name in ("on-chip sync and exchange latency per compute set (Mk1)",
                 "IPU-Link all-reduce and collective curves (Mk1)"):
        assert rows[name].public is None and rows[name].source.startswith("not found")
