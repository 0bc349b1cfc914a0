"""poprun-ipu on the presets as they are: predict (one, --all, --json, --report-dir), profile, the exit
status of a plan that does not fit, ``python -m launch.predict``."""

import json
import subprocess
import sys

import pytest

from ipu.plan import PRESETS
from launch.predict import cli, commands
from ipu.cost.prediction import BREAKDOWN
from tests.ipu.effnet_profile import efficientnet_profile


@pytest.fixture
def synthetic_profiles(monkeypatch):
    """EfficientNet presets get the hand-made test profile; ResNet presets the real model's."""
    real = commands.load_profile

    def load(plan):
        if not plan.model.startswith("efficientnet"):
            return real(plan)
        o = plan.overrides
        return efficientnet_profile(4, plan.micro_batch, o["group_size"], o["expand_ratio"], plan.image_size)
    monkeypatch.setattr(commands, "load_profile", load)


def test_predict_prints_fit_breakdown_and_comparison(synthetic_profiles, capsys, tmp_path):
    assert cli.main(["predict", "--preset", "g16-b4-pod256", "--report-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "=== g16-b4-pod256" in out and "128 replicas x 2 IPUs" in out and "global batch 6144" in out
    assert "stem..block3d" in out and "block4a..head" in out
    assert "images/s for the POD" in out and "time to train 350 epochs" in out
    assert "published: 1.8 h to train -> published/predicted = " in out
    assert "IPU0 | FWD.1" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory_g16-b4-pod256.png", "timeline_g16-b4-pod256.png"]


def test_predict_all_presets(synthetic_profiles, capsys):
    assert cli.main(["predict", "--all", "--epochs", "10"]) == 0
    out = capsys.readouterr().out
    assert out.count("=== ") == len(PRESETS)
    assert out.count("time to train 10 epochs") == len(PRESETS)


def test_unknown_preset_is_rejected(capsys):
    with pytest.raises(SystemExit):
        cli.main(["predict", "--preset", "g16-b4-pod32"])
    assert "invalid choice" in capsys.readouterr().err


def test_module_entry_point_help():
    done = subprocess.run([sys.executable, "-m", "launch.predict", "predict", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--preset" in done.stdout


def test_a_plan_that_does_not_fit_says_so_and_exits_1(synthetic_profiles, capsys):
    assert cli.main(["predict", "--preset", "g16-b4-pod16", "--chip", "mk1"]) == 1
    out, err = capsys.readouterr()
    assert "Out of memory on tile" in out and "of IPU 0" in out and "of IPU 1" in out
    assert "(hypothetical: the program does not fit)" in out
    assert "1 of 1 plan(s) do not fit in IPU memory: g16-b4-pod16 (mk1)" in err
    assert cli.main(["predict", "--preset", "g16-b4-pod16", "--chip", "mk1", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["predictions"][0]["memory"]["fits"] is False and "g16-b4-pod16 (mk1)" in err
    assert cli.main(["predict", "--preset", "g16-b4-pod16", "--chip", "mk2"]) == 0


PREDICTION_KEYS = {
    "preset", "model", "chip", "system", "replicas", "ipus_per_replica", "micro_batch", "gradient_accumulation",
    "global_batch", "precision", "step_time_s", "images_per_s", "epochs", "time_to_train_h", "utilisation",
    "flops_per_image", "breakdown_s", "host_io_total_s", "host_copy_s", "io_overlapped", "stages", "memory",
}


def test_predict_json_is_a_stable_interface(synthetic_profiles, capsys):
    assert cli.main(["predict", "--preset", "g16-b4-pod256", "--chip", "mk2", "--json"]) == 0
    first = capsys.readouterr().out
    assert cli.main(["predict", "--preset", "g16-b4-pod256", "--chip", "mk2", "--json"]) == 0
    assert capsys.readouterr().out == first  # deterministic
    data = json.loads(first)
    assert data["schema"] == 1 and len(data["predictions"]) == 1
    p = data["predictions"][0]
    assert set(p) == PREDICTION_KEYS | {"published_hours", "published_over_predicted"}
    assert p["chip"] == "mk2" and p["system"] == "POD256" and p["global_batch"] == 6144
    assert set(p["breakdown_s"]) == set(BREAKDOWN)
    assert sum(p["breakdown_s"].values()) == pytest.approx(p["step_time_s"])
    assert set(p["stages"][0]) == {"ipu", "fwd_s", "recomp_s", "bwd_s", "cycles_per_micro_batch",
                                   "compute_sets_per_micro_batch", "optimizer_s"}
    assert set(p["stages"][0]["cycles_per_micro_batch"]) == {"matrix", "vector", "exchange", "sync"}
    assert cli.main(["predict", "--preset", "g16-b4-pod256", "--chip", "bow", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["predictions"][0]) == PREDICTION_KEYS  # the 1.8 h was Mk2


def test_predict_all_on_both_chips_prints_the_breakdown(synthetic_profiles, capsys):
    for chip in ("mk2", "bow"):
        assert cli.main(["predict", "--all", "--chip", chip]) == 0
        out = capsys.readouterr().out
        assert out.count("=== ") == len(PRESETS) and f"({chip})" in out
        assert out.count("step (one weight update)") == len(PRESETS) and "matrix" in out and "sync" in out


def test_profile_prints_the_table_and_writes_the_png(synthetic_profiles, capsys, tmp_path):
    assert cli.main(["profile", "--preset", "g16-b4-pod16", "--chip", "bow", "--out", str(tmp_path), "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "-- IPU 0" in out and "-- IPU 1" in out and "the 5 most expensive" in out
    assert "lars_norms" in out and "all-reduce" in out and "AMP" in out
    png = tmp_path / "profile_g16-b4-pod16_bow.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_json_adds_up(synthetic_profiles, capsys, tmp_path):
    assert cli.main(["profile", "--preset", "g16-b4-pod16", "--json", "--out", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == 1 and data["chip"] == "mk2" and data["png"].endswith("profile_g16-b4-pod16_mk2.png")
    ipu0 = data["ipus"][0]
    layers = sum(p["total"] for layer in ipu0["layers"] for p in layer["passes"].values())
    assert layers + ipu0["per_update"]["accumulate"]["total"] / data["gradient_accumulation"] == pytest.approx(
        ipu0["per_micro_batch"]["total"], rel=1e-6)
    assert set(ipu0["per_update"]) == {"accumulate", "lars_norms", "update", "stores"}
    assert {"fwd", "recomp", "bwd"} == set(ipu0["layers"][0]["passes"])  # stage 0 recomputes


def test_chip_works_on_every_command():
    parser = cli.build_parser()
    for command in (["predict", "--all"], ["profile", "--preset", "g16-b4-pod16"], ["validate"]):
        assert parser.parse_args(command + ["--chip", "bow"]).chip == "bow"
