import pytest

from ipu.pipeline.split import (
    block_order, check_gradient_accumulation, replica_schedule, split_at, split_balanced, stashed_elems,
)
from ipu.pipeline.schedule import build_schedule
from tests.ipu.toy_profiles import toy_layer


def test_split_at_named_blocks(toy_profile):
    split = split_at(toy_profile, ["block2a"])
    assert split.blocks == (("stem", "block1a"), ("block2a", "head"))
    assert split.layer_stage == (0, 0, 0, 1, 1)
    assert split.splits == ("block2a",)


def test_g16_recipe_split_at_block4a(b4_g16):
    split = split_at(b4_g16, ["block4a"])
    assert split.blocks[0][0] == "stem" and split.blocks[0][-1] == "block3d"
    assert split.blocks[1][0] == "block4a" and split.blocks[1][-1] == "head"
    assert len(block_order(b4_g16)) == 34  # stem + 32 blocks + head


def test_bad_split_says_which_blocks_exist(toy_profile):
    with pytest.raises(ValueError, match="'block9z' is not a block of this model: choose from block1a, block2a, head"):
        split_at(toy_profile, ["block9z"])
    with pytest.raises(ValueError, match="in model order"):
        split_at(toy_profile, ["head", "block1a"])


def test_balanced_split_minimises_the_largest_stage(toy_profile):
    # block weights (flops fwd + bwd): stem 90, block1a 120, block2a 90, head 30
    assert split_balanced(toy_profile, 2).blocks == (("stem", "block1a"), ("block2a", "head"))
    assert split_balanced(toy_profile, 3).blocks == (("stem",), ("block1a",), ("block2a", "head"))
    # by memory (params + saved): stem 14, block1a 10, block2a 12, head 14
    assert split_balanced(toy_profile, 2, by="memory").blocks == (("stem", "block1a"), ("block2a", "head"))


def test_balanced_b4_split_is_close_to_even(b4_g16):
    split = split_balanced(b4_g16, 4)
    flops = [sum(l.flops_fwd + l.flops_bwd for l in split.layers(b4_g16, s)) for s in range(4)]
    assert max(flops) / min(flops) < 1.6


def test_gradient_accumulation_must_be_twice_the_stages():
    check_gradient_accumulation(8, 4)
    check_gradient_accumulation(1, 1)
    msg = "gradient accumulation 6 is too small for a 4-stage pipeline: it must be at least 2 x stages = 8"
    with pytest.raises(ValueError, match=msg):
        check_gradient_accumulation(6, 4)


def test_recomputation_changes_what_is_stashed(toy_profile):
    split = split_at(toy_profile, ["block2a"])
    plain = stashed_elems(toy_profile, split, build_schedule("grouped", 2, 4), input_elems=100)
    # stage 0 keeps 4 micro-batches of saved activations (5 + 6 + 7 = 18 each)
    assert plain[0] == {"activations stem x4": 44, "activations block1a x4": 28}
    assert plain[1] == {"activations block2a x2": 16, "activations head x2": 18}
    recomputed = stashed_elems(toy_profile, split, build_schedule("grouped", 2, 4, recompute=True), input_elems=100)
    # stage 0 keeps only its input per micro-batch in flight, plus one micro-batch being recomputed
    assert recomputed[0] == {"stage input x4": 400, "activations stem (recomputed)": 11,
                             "activations block1a (recomputed)": 7}
    assert recomputed[1] == plain[1]  # the last stage does not recompute
    second = stashed_elems(toy_profile, split_at(toy_profile, ["block1a", "block2a"]),
                           build_schedule("grouped", 3, 6, recompute=True), input_elems=100)
    assert second[1]["stage input x4"] == 4 * 8  # stage 1's input is the stem's output (8 elems)


def test_single_stage_runs_sequentially():
    s = replica_schedule("grouped", 1, 3, recompute=True)
    assert s.kind == "sequential" and s.max_in_flight(0) == 1


def test_interleaved_stashes_less_than_grouped(b4_g16):
    split = split_at(b4_g16, ["block4a"])
    grouped = stashed_elems(b4_g16, split, build_schedule("grouped", 2, 16), 3 * 380 * 380 * 3)
    inter = stashed_elems(b4_g16, split, build_schedule("interleaved", 2, 16), 3 * 380 * 380 * 3)
    assert sum(inter[0].values()) * 2 == sum(grouped[0].values())


def test_blocks_must_be_contiguous():
    profile = [toy_layer("a", "stem"), toy_layer("b", "block1a"), toy_layer("c", "stem")]
    with pytest.raises(ValueError, match="'stem' is not contiguous"):
        block_order(profile)


def test_a_conv_keeps_its_input_not_an_im2col_expansion():
    from ipu.pipeline.split import ipu_saved_elems
    layers = [toy_layer("c", "stem", act=10, saved=27),
              toy_layer("n", "stem", act=10, saved=10, matmul=False, kind="norm"),
              toy_layer("d", "stem", act=5, saved=90, kind="dwconv")]
    assert ipu_saved_elems(layers, input_elems=3) == [3, 10, 10]


def test_single_ipu_recomputation_keeps_block_checkpoints(toy_profile):
    split = split_at(toy_profile, [])
    s = replica_schedule("grouped", 1, 2, recompute=True)
    assert s.labels() == [["FWD.1", "RECOMP.1", "BWD.1", "FWD.2", "RECOMP.2", "BWD.2"]]
    (stash,) = stashed_elems(toy_profile, split, s, input_elems=100)
    # block inputs: stem <- image (100), block1a <- stem (8), block2a <- block1a (10), head <- block2a (10);
    # plus the largest block's saved activations (stem: 5 + 6), recomputed one block at a time
    assert stash == {"activations stem (recomputed)": 11, "checkpoint stem": 100, "checkpoint block1a": 8,
                     "checkpoint block2a": 10, "checkpoint head": 10}
    plain = stashed_elems(toy_profile, split, replica_schedule("grouped", 1, 2, recompute=False), 100)
    assert plain[0] == {"activations stem x1": 11, "activations block1a x1": 7, "activations block2a x1": 8,
                        "activations head x1": 9}
