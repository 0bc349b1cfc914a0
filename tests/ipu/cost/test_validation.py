"""The validation rows: each component against its own figure, no EfficientNet figure anywhere."""

import pytest

from ipu.cost.evidence import jia2019, mlperf_v11
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


def test_hardware_measurements_give_the_compute_set_range_and_the_triad_rate():
    from ipu.cost.evidence import hardware_measurements as hw

    intercept, slope = hw.zero_work_intercept()  # least squares through (1, 3905) ... (5, 18505)
    assert slope == pytest.approx(3650.2) and intercept == pytest.approx(11205 - 3 * 3650.2)
    assert hw.block_instrumentation_cycles() == 139
    fixed = hw.compute_set_fixed_cycles()
    assert (fixed.low, fixed.high) == (pytest.approx(254.4 - 139), pytest.approx(254.4))
    rows = {c.component: c for c in components()}
    cs = next(c for name, c in rows.items() if name.startswith("fixed cost of a compute set that exchanges nothing"))
    assert cs.model == 90 + 11 and cs.ratio == pytest.approx(101 / 254.4) and cs.ratio_high == pytest.approx(101 / 115.4)
    triad = rows["fp32 streaming vector op, 12 B per element (Mk1)"]
    # 2^23 floats over 1216 tiles: 6,899 a tile, 1,150 a worker, 575 vectors of 2 at 3 cycles; 6 workers x (21 + 1,725)
    # + supervisor 11, + sync 90 = 10,577 cycles at 1.6 GHz for 12 bytes an element
    assert triad.model == pytest.approx(12 * 2**23 * 1.6e9 / 10_577 / 1e9)
    assert triad.public == 12_420 and triad.ratio == pytest.approx(triad.model / 12_420)
    table = format_components([cs, triad])
    assert "| 101 cycles | 115-254 cycles | 0.40-0.88 |" in table and "| 15,228 GB/s | 12,420 GB/s | 1.23 |" in table


def test_the_profilers_own_cycles_inside_a_block_follow_from_the_nested_example():
    from ipu.cost.evidence import hardware_measurements as hw

    assert hw.in_block_instrumentation_cycles() == 3623 - 7238 / 2  # 4 cycles
    assert hw.compute_set_fixed_cycles_equal_ops() == pytest.approx(254.4 - 4)
