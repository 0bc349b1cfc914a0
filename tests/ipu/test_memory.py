from dataclasses import replace

import numpy as np
import pytest

from ipu.memory import (
    CODE_BYTES_PER_LAYER_PER_TILE, CODE_BYTES_PER_TILE, IpuOutOfMemoryError, check_fit, fit,
)
from ipu.compile import format_memory_report, plot_memory_report
from ipu.plan import PRESETS, IpuPlan
from tests.ipu.toy_profiles import toy_layer


@pytest.mark.parametrize("name", ["g16-b4-pod16", "g16-b4-pod256"])
def test_graphcore_g16_recipe_fits(name, b4_g16):
    memory = check_fit(PRESETS[name], b4_g16)
    assert memory.fits and len(memory.ipus) == 2
    assert memory.io.overlap and memory.io.compute_tiles == 1472 - 32


def test_graphcore_g1_baseline_fits(b4_g1):
    assert check_fit(PRESETS["g1-b4-4ipu"], b4_g1).fits


def test_recipe_without_recomputation_runs_out_of_memory(b4_g16):
    plan = replace(PRESETS["g16-b4-pod16"], recompute=False)
    with pytest.raises(IpuOutOfMemoryError) as err:
        check_fit(plan, b4_g16)
    msg = str(err.value)
    assert msg.startswith("Out of memory on tile ")
    assert " of IPU 0: " in msg and " over; " in msg
    assert "Largest consumers on IPU 0: stashed activations block" in msg
    assert "enable recomputation (recompute=True)" in msg
    assert isinstance(err.value, ValueError)


def test_whole_b4_on_one_ipu_needs_recomputation_checkpoints(b4_g16):
    plan = replace(PRESETS["g16-b4-pod16"], ipus_per_replica=1, pipeline_splits=(), gradient_accumulation=512,
                   recompute=False)
    memory = fit(plan, b4_g16)
    assert not memory.fits and memory.ipus[0].tiles_over > 1000
    checkpointed = fit(replace(plan, recompute=True), b4_g16).ipus[0]
    assert checkpointed.by_category["stash"] < memory.ipus[0].by_category["stash"] / 4


def test_larger_micro_batch_needs_more_memory():
    from tests.ipu.effnet_profile import efficientnet_profile

    plan = PRESETS["g16-b4-pod16"]
    small = fit(plan, efficientnet_profile(4, 3, 16, 4)).ipus[0].total_bytes
    big = fit(replace(plan, micro_batch=6), efficientnet_profile(4, 6, 16, 4)).ipus[0].total_bytes
    assert big > 1.8 * small


def _toy_plan(**kw):
    base = dict(model="toy", image_size=2, micro_batch=1, gradient_accumulation=4, ipus_per_replica=2,
                pipeline_splits=("block2a",), precision="16.16", optimizer="lars", recompute=False)
    base.update(kw)
    return IpuPlan(**base)


def test_categories_are_exact_on_a_toy_profile(toy_profile):
    memory = fit(_toy_plan(), toy_profile)
    ipu0, ipu1 = memory.ipus
    # stage 0 holds stem (3 params) and block1a (3 params): fp16 weights, 1 momentum slot, accumulators
    assert ipu0.by_category["weights"] == 6 * 2
    assert ipu0.by_category["optimizer"] == 6 * 2
    assert ipu0.by_category["accumulators"] == 6 * 2
    assert ipu0.by_category["stash"] == 4 * 18 * 2  # 4 micro-batches in flight, 18 saved elems, fp16
    assert ipu1.by_category["stash"] == 2 * 17 * 2
    assert ipu0.by_category["code"] == 1472 * (CODE_BYTES_PER_TILE + 3 * CODE_BYTES_PER_LAYER_PER_TILE)
    full = fit(_toy_plan(precision="32.32", optimizer="rmsprop", gradient_accumulation=4), toy_profile).ipus[0]
    assert full.by_category["weights"] == 6 * 4 and full.by_category["optimizer"] == 2 * 6 * 4
    # every byte is placed on some tile
    assert ipu0.tile_bytes.sum() == pytest.approx(ipu0.total_bytes, abs=len(ipu0.tile_bytes))


def test_io_tiles_leave_fewer_compute_tiles(toy_profile):
    memory = fit(_toy_plan(num_io_tiles=64), toy_profile)
    assert len(memory.ipus[0].tile_bytes) == 1472 - 64
    assert memory.ipus[0].worst_tile >= 64


def test_lower_available_memory_proportion_caps_temporaries(b4_g16):
    plan = PRESETS["g16-b4-pod16"]
    high = fit(replace(plan, available_memory_proportion=0.6), b4_g16).ipus[0].by_category["temporaries"]
    low = fit(replace(plan, available_memory_proportion=0.05), b4_g16).ipus[0].by_category["temporaries"]
    assert low < high


def test_tensor_placement_fills_every_tile_for_large_tensors():
    profile = [toy_layer("a", "stem", params=10_000_000), toy_layer("b", "head", params=1)]
    tiles = fit(_toy_plan(ipus_per_replica=1, pipeline_splits=(), gradient_accumulation=1), profile).ipus[0].tile_bytes
    assert np.ptp(tiles) <= tiles.max() * 0.01


def test_report_text_and_png(b4_g16, tmp_path):
    memory = fit(PRESETS["g16-b4-pod64"], b4_g16)
    text = format_memory_report(memory)
    header, ipu0, ipu1, io = text.splitlines()
    assert header.split()[:4] == ["IPU", "blocks", "weights", "optimizer"]
    assert ipu0.split()[1] == "stem..block3d" and ipu1.split()[1] == "block4a..head"
    assert ipu0.rstrip().endswith("yes")
    assert io.startswith("IO tiles: 32 per IPU") and "overlaps compute" in io
    assert plot_memory_report(memory, tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"


def test_stages_sharing_an_ipu_share_its_tiles(toy_profile):
    """device_mapping [0, 1, 1, 0]: IPU 0 holds stem and head, IPU 1 the two middle blocks."""
    base = IpuPlan(model="toy", image_size=4, image_channels=1, micro_batch=1, gradient_accumulation=8,
                   ipus_per_replica=4, pipeline_splits=("block1a", "block2a", "head"), precision="32.32",
                   optimizer="sgd", system="POD4")
    alone = fit(base, toy_profile)
    shared = fit(replace(base, device_mapping=(0, 1, 1, 0), ipus_per_replica=2), toy_profile)
    assert [m.blocks for m in shared.ipus] == [("stem", "head"), ("block1a", "block2a")]
    weights = [m.by_category["weights"] for m in alone.ipus]
    assert [m.by_category["weights"] for m in shared.ipus] == [weights[0] + weights[3], weights[1] + weights[2]]
    assert base.image_elems == 16 and base.num_stages == 4 and shared.split.num_stages == 4


def test_device_mapping_must_fit_the_replica():
    with pytest.raises(ValueError, match="uses IPU 2 but a replica has 2 IPUs .* raise ipus_per_replica"):
        IpuPlan(ipus_per_replica=2, device_mapping=(0, 2), gradient_accumulation=4)
    with pytest.raises(ValueError, match="at least 2 x stages = 6"):
        IpuPlan(ipus_per_replica=2, device_mapping=(0, 1, 1), gradient_accumulation=4)
