import subprocess
import sys

import pytest
from effnet_profile import efficientnet_profile

from ipu import cli


@pytest.fixture
def synthetic_profiles(monkeypatch):
    def load(plan):
        o = plan.overrides
        return efficientnet_profile(4, plan.micro_batch, o["group_size"], o["expand_ratio"], plan.image_size)
    monkeypatch.setattr(cli, "load_profile", load)


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
    assert out.count("=== ") == len(cli.PRESETS)
    assert out.count("time to train 10 epochs") == len(cli.PRESETS)


def test_unknown_preset_is_rejected(capsys):
    with pytest.raises(SystemExit):
        cli.main(["predict", "--preset", "g16-b4-pod32"])
    assert "invalid choice" in capsys.readouterr().err


def test_module_entry_point_help():
    done = subprocess.run([sys.executable, "-m", "ipu", "predict", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--preset" in done.stdout


def test_a_plan_that_does_not_fit_says_so(synthetic_profiles, capsys):
    assert cli.main(["predict", "--preset", "g16-b4-pod16", "--chip", "mk1"]) == 0
    out = capsys.readouterr().out
    assert "Out of memory on tile" in out and "of IPU 0" in out and "of IPU 1" in out
    assert "(hypothetical: the program does not fit)" in out
