"""Training configurations: presets, overrides, errors that name the key, distribution."""

from __future__ import annotations

import dataclasses
import re

import pytest

from launch.train.config import TrainConfig
from launch.train.config_file import from_dict, load_config, override_keys
from launch.train.distribute import distribute, placement
from poprun_py.env import DistInfo
from poprun_py.topology import InstanceInfo, single_instance


def test_default_config_loads_with_its_sections():
    cfg = load_config("default")
    assert isinstance(cfg, TrainConfig)
    assert cfg.data.path == "data/fashion-mnist-subset.h5" and cfg.data.replicas == 4
    assert cfg.global_batch == cfg.data.micro_batch * cfg.data.grad_accum * 4
    assert cfg.model.kwargs["norm"] == "group"


@pytest.mark.parametrize("name,replicas,accum", [("g16-b4-pod16", 8, 256), ("g16-b4-pod64", 32, 64),
                                                 ("g16-b4-pod128", 64, 32), ("g16-b4-pod256", 128, 16)])
def test_g16_b4_recipes_keep_the_global_batch_and_learning_rate(name, replicas, accum):
    cfg = load_config(name)
    assert (cfg.data.replicas, cfg.data.grad_accum, cfg.data.micro_batch) == (replicas, accum, 3)
    assert cfg.global_batch == 6144
    assert cfg.schedule.resolve(cfg.global_batch).base_lr == pytest.approx(8.48528137, rel=1e-8)
    assert (cfg.optim.name, cfg.optim.momentum, cfg.optim.weight_decay) == ("lars", 0.885, 2.5e-6)
    assert (cfg.schedule.kind, cfg.schedule.warmup_epochs, cfg.schedule.power, cfg.schedule.end_ratio) == \
        ("polynomial", 70.0, 2.0, 1e-5)
    assert (cfg.data.mixup_alpha, cfg.data.cutmix_lambda, cfg.model.label_smoothing) == (0.2, 0.85, 0.1)
    assert (cfg.ipu.ipus_per_replica, cfg.ipu.pipeline_splits) == (2, ("block4a",))
    assert cfg.loss_scaling.initial_scale == 128.0 and cfg.ema.decay == 0.97 and cfg.run.epochs == 350


def test_overrides_win_and_are_parsed_as_yaml():
    cfg = load_config("default", ["optim.momentum=0.8", "data.crop_scale=[0.5, 1.0]", "model.options.width=0.5",
                                  "schedule.end_ratio=1e-3", "run.evaluate=false"])
    assert cfg.optim.momentum == 0.8 and cfg.data.crop_scale == (0.5, 1.0)
    assert cfg.model.kwargs["width"] == 0.5 and cfg.model.kwargs["norm"] == "group"
    assert cfg.schedule.end_ratio == 1e-3 and cfg.run.evaluate is False


@pytest.mark.parametrize("override,message", [
    ("optim.momentumm=0.9", r"optim\.momentumm: unknown key; did you mean optim\.momentum\?; valid keys of optim are "
                            r"name, momentum, weight_decay"),
    ("optim.lr=0.1", r"optim\.lr: unknown key; did you mean schedule\.base_lr( |\?)"),
    ("optim.epochs=3", r"did you mean run\.epochs"),
    ("optimiser.momentum=0.9", r"unknown section 'optimiser'; did you mean optim\.momentum\?; sections are data, "
                               r"model, optim"),
    ("momentum=0.9", r"write section\.field=value"),
    ("optim.momentum=fast", r"optim\.momentum='fast' is not a number"),  # issue 11: in words
    ("optim.momentum=1.5", r"optim\.momentum=1\.5 must be in \[0\.0, 1\.0\)"),
    ("data.micro_batch=0", r"data\.micro_batch=0 must be >= 1"),
])
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(ValueError, match=message):
        load_config("default", [override])


def test_unknown_names_and_sections_in_files_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="no configuration 'nope'.*choose one of .*default"):
        load_config("nope")
    path = tmp_path / "mine.yml"
    path.write_text("mine:\n  run: {epochs: 2}\n  trainer: {x: 1}\n")
    with pytest.raises(ValueError, match="unknown section 'trainer'"):
        load_config(f"{path}:mine")
    with pytest.raises(ValueError, match=r"run\.epoch: unknown key; did you mean run\.epochs\?; valid keys of run are epochs"):
        from_dict({"run": {"epoch": 2}})


def test_to_dict_round_trips():
    cfg = load_config("g16-b4-pod64", ["model.options.dropout=0.3"])
    assert from_dict(cfg.to_dict()) == cfg


def dist(instances, replicas, ipus=1, system="", index=0):
    local = replicas // instances
    return DistInfo(is_set=True, placement=InstanceInfo(
        index=index, num_instances=instances, host="h", local_index=index, num_local_replicas=local,
        replica_offset=index * local, num_total_replicas=replicas, ipus_per_replica=ipus, ild=0, device_id=0,
        system=system))


def test_distribute_accepts_the_launchers_matching_topology():
    cfg = load_config("default")
    assert distribute(cfg, dist(2, 4)) == cfg
    assert distribute(cfg, DistInfo(is_set=False)) == cfg


def test_the_launchers_replica_count_wins_unless_given_on_the_command_line(caplog):
    cfg = distribute(load_config("default"), dist(2, 8))
    assert cfg.data.replicas == 8 and cfg.global_batch == 128
    assert "data.replicas=4 gives way: global batch 128 instead of 64" in caplog.text
    pinned = load_config("default", ["data.replicas=4"])
    with pytest.raises(ValueError, match=r"launcher runs 8 replicas but --set data\.replicas=4 asks for 4; launch "
                                         r"with --num-replicas 4 or leave data\.replicas out"):
        distribute(pinned, dist(2, 8), override_keys(["data.replicas=4"]))
    assert distribute(pinned, dist(2, 4), override_keys(["data.replicas=4"])) == pinned


def test_one_of_two_ways_to_say_a_value_replaces_the_other_from_the_file():
    assert load_config("default").schedule.warmup_epochs == 1
    steps = load_config("default", ["schedule.warmup_steps=5"]).schedule
    assert (steps.warmup_steps, steps.warmup_epochs) == (5, 0.0)
    with pytest.raises(ValueError, match="warmup_steps or schedule.warmup_epochs, not both"):
        load_config("default", ["schedule.warmup_steps=5", "schedule.warmup_epochs=2"])
    pod = load_config("g16-b4-pod16", ["schedule.base_lr=0.1"]).schedule
    assert (pod.base_lr, pod.lr_exponent) == (0.1, None)
    assert load_config("g16-b4-pod16").schedule.lr_exponent == -9.5


def test_list_keys_names_every_key_with_type_default_and_the_configs_value():
    from launch.train.config import SECTIONS
    from launch.train.config_keys import all_keys, describe_keys

    text = describe_keys(SECTIONS, load_config("default").to_dict())
    lines = text.splitlines()
    assert len(lines) == 1 + len(all_keys(SECTIONS))
    assert re.search(r"^data\.replicas +int +1 +4$", text, re.M)
    assert re.search(r"^schedule\.warmup_steps +int \| null +null$", text, re.M)
    assert re.search(r"^model\.options +mapping +\{\} +\{'drop_connect'", text, re.M)
    with pytest.raises(ValueError, match=r"--ipus-per-replica 2"):
        distribute(load_config("g16-b4-pod16"), dist(8, 8, ipus=1))


def test_the_launchers_system_reaches_the_config_and_a_different_one_names_the_fix():
    assert distribute(load_config("default"), dist(2, 4, system="POD16")).ipu.system == "POD16"
    pod64 = load_config("g16-b4-pod64")
    assert distribute(pod64, dist(32, 32, ipus=2, system="POD64")) == pod64
    with pytest.raises(ValueError, match=r"launcher runs on POD128 but the config has ipu\.system=POD64; "
                                         r"launch with --system POD64 or pass --set ipu\.system=POD128"):
        distribute(pod64, dist(32, 32, ipus=2, system="POD128"))


def test_placement_is_the_launchers_else_one_instance_with_every_replica():
    launched = dist(2, 4, index=1, system="POD4")
    cfg = distribute(load_config("default"), launched)
    assert placement(cfg, launched) is launched.placement
    assert placement(cfg, launched).replicas == range(2, 4)
    alone = placement(load_config("default"), DistInfo(is_set=False))
    assert alone == single_instance(4, 1, "")
    assert (alone.num_instances, alone.num_local_replicas, alone.replicas) == (1, 4, range(0, 4))


def test_precision_emulation_is_on_in_the_recipe_and_fmnist_16_16_only():
    assert not load_config("default").ipu.emulate_precision
    for name in ("g16-b4-pod16", "g16-b4-pod256", "fmnist-16.16"):
        cfg = load_config(name)
        assert cfg.ipu.emulate_precision and cfg.ipu.precision == "16.16" and cfg.ipu.stochastic_rounding, name
    assert load_config("fmnist-16.16", ["ipu.precision='32.32'"]).ipu.precision == "32.32"


def test_a_bad_or_unquoted_precision_names_the_fix():
    with pytest.raises(ValueError, match="quote it in YAML: --set \"ipu.precision='16.16'\""):
        load_config("default", ["ipu.precision=16.16"])
    with pytest.raises(ValueError, match="ipu.precision='16.8' is not a precision mode: choose one of 32.32"):
        load_config("default", ["ipu.precision='16.8'"])


@pytest.mark.parametrize("pod", ["pod16", "pod64", "pod128", "pod256"])
def test_the_recipe_configs_are_the_ipu_presets(pod):
    from ipu.plan import get_preset
    from launch.train.plan import ipu_plan
    from models.registry import efficientnet_config

    preset = get_preset(f"g16-b4-{pod}")
    plan = ipu_plan(load_config(f"g16-b4-{pod}"), (380, 380, 3), 1000, preset.dataset_images)
    assert dataclasses.replace(plan, model=preset.model, model_overrides=preset.model_overrides) == preset
    assert efficientnet_config(plan.model, **plan.overrides) == efficientnet_config(preset.model, **preset.overrides,
                                                                                    resolution=preset.image_size)


def test_an_unknown_preset_names_the_known_ones(tmp_path):
    path = tmp_path / "mine.yml"
    path.write_text("mine: {preset: g16-b4-pod3}\n")
    with pytest.raises(ValueError, match="preset: unknown preset 'g16-b4-pod3': choose one of g16-b4-pod4"):
        load_config(f"{path}:mine")


@pytest.mark.parametrize("override,words", [
    ("data.micro_batch='abc'", r"data\.micro_batch='abc' is not an integer"),
    ("optim.momentum=[1]", r"optim\.momentum=\[1\] is not a number"),
    ("run.evaluate=3", r"run\.evaluate=3 is not true or false"),
    ("data.crop_scale=5", r"data\.crop_scale=5 is not a list"),
])
def test_a_wrong_type_says_what_the_field_takes_in_words(override, words):
    with pytest.raises(ValueError, match=words):
        load_config("default", [override])


def test_print_config_is_the_resolved_config_as_yaml_and_list_keys_every_key(capsys):
    import yaml

    from launch.train.cli import main

    assert main(["--config", "dense", "--set", "optim.momentum=0.5", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == load_config("dense", ["optim.momentum=0.5"]).to_dict()
    assert main(["--config", "dense", "--list-keys"]) == 0
    assert re.search(r"^optim\.momentum +float +0\.9$", capsys.readouterr().out, re.M)
