"""The training configuration and the ``IpuPlan`` both ways (``launch.train.plan``): a plan's config sections
give the plan back, every preset's, and a configuration's plan gives its sections back."""

import dataclasses

import pytest

from ipu.plan import PRESETS
from launch.train.config_file import from_dict, load_config
from launch.train.plan import ipu_plan, plan_sections


def _cpu_recompute(sections: dict) -> dict:
    """The sections as a run's plan has them: the CPU replica recomputes only when pipelined."""
    ipu = sections["ipu"]
    return {**sections, "ipu": {**ipu, "recompute": ipu["recompute"] and ipu["ipus_per_replica"] > 1}}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_presets_sections_give_its_plan_back(name):
    preset = PRESETS[name]
    cfg = from_dict(plan_sections(preset), source=f"preset {name}")
    plan = ipu_plan(cfg, (preset.image_size, preset.image_size, 3), preset.num_classes, preset.dataset_images)
    assert plan_sections(plan) == _cpu_recompute(plan_sections(preset))
    # and the plan's own fields, named as the plan names them
    for field in ("micro_batch", "gradient_accumulation", "replicas", "ipus_per_replica", "pipeline_splits",
                  "schedule", "precision", "system", "chip", "device_iterations", "epochs", "num_io_tiles"):
        assert getattr(plan, field) == getattr(preset, field), field


@pytest.mark.parametrize("name", ["default", "dense", "g16-b4-pod16"])
def test_a_configurations_plan_gives_its_sections_back(name):
    cfg = load_config(name)
    plan = ipu_plan(cfg, (28, 28, 1), 10, 60_000)
    sections = plan_sections(plan)
    back = from_dict({k: {**v, **sections.get(k, {})} for k, v in cfg.to_dict().items()})
    assert dataclasses.replace(back, ipu=dataclasses.replace(back.ipu, recompute=cfg.ipu.recompute)) == \
        dataclasses.replace(cfg, ipu=dataclasses.replace(cfg.ipu, system=plan.system))
