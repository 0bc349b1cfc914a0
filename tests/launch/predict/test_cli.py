"""poprun-ipu predict|profile with --config/--set, the plan options and sweeps (launch.predict.cli)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launch.predict import cli as predict
from launch.predict.sweep_report import SWEEP_SCHEMA

POPRUN_IPU = str(Path(sys.executable).with_name("poprun-ipu"))
SWEEP = ["predict", "--config", "g16-b4-pod16", "--system", "POD16,POD64", "--micro-batch", "2,3",
         "--ipus-per-replica", "2,4"]


def test_predict_a_config_with_an_override_from_any_directory(tmp_path):
    done = subprocess.run([POPRUN_IPU, "predict", "--config", "g16-b4-pod16", "--set", "data.micro_batch=2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "=== g16-b4-pod16: efficientnet-b4-g16-gn" in done.stdout
    assert "8 replicas x 2 IPUs, micro-batch 2, GA 256 -> global batch 4096" in done.stdout
    assert "images/s for the POD" in done.stdout and "assuming ImageNet" in done.stderr


def test_sweep_json_rows_sorted_fastest_first(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert predict.main([*SWEEP, "--json", "--plot", "sweep.png"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == SWEEP_SCHEMA == 1 and doc["kind"] == "sweep" and doc["config"] == "g16-b4-pod16"
    assert doc["options"] == {"system": ["POD16", "POD64"], "micro_batch": [2, 3], "ipus_per_replica": [2, 4]}
    rows = doc["rows"]
    assert len(rows) == 8 and doc["fitting"] == 8 and all(r["fits"] and r["status"] == "fits" for r in rows)
    speeds = [r["images_per_s"] for r in rows]
    assert speeds == sorted(speeds, reverse=True)
    assert {(r["system"], r["replicas"], r["ipus_per_replica"], r["micro_batch"], r["gradient_accumulation"])
            for r in rows} == {("POD16", 8, 2, 2, 384), ("POD16", 8, 2, 3, 256), ("POD16", 4, 4, 2, 768),
                               ("POD16", 4, 4, 3, 512), ("POD64", 32, 2, 2, 96), ("POD64", 32, 2, 3, 64),
                               ("POD64", 16, 4, 2, 192), ("POD64", 16, 4, 3, 128)}
    assert all(r["global_batch"] == 6144 for r in rows)
    four = [r for r in rows if r["ipus_per_replica"] == 4]
    assert all(r["auto_split"] and len(r["pipeline_splits"]) == 3 for r in four)
    assert all(r["pipeline_splits"] == ["block4a"] and not r["auto_split"] for r in rows if r not in four)
    assert rows[0]["system"] == "POD64"
    assert set(rows[0]) >= {"peak_tile_bytes", "memory_per_tile", "step_time_s", "time_to_train_h", "utilisation",
                            "choice", "precision", "num_hosts"}
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_sweep_table_marks_what_does_not_fit_after_what_fits(capsys):
    assert predict.main(["predict", "--preset", "g16-b4-pod16", "--chip", "mk1,mk2"]) == 0
    out = capsys.readouterr().out
    first, second = out.splitlines()[2:4]
    assert " yes " in first and " NO " in second  # mk2 fits, mk1 does not: listed after
    assert "1 of 2 combinations fit" in out


def test_a_config_that_does_not_fit_says_so_in_poplars_words_and_exits_1(capsys):
    assert predict.main(["predict", "--config", "g16-b4-pod16", "--chip", "mk1", "--micro-batch", "4"]) == 1
    out, err = capsys.readouterr()
    assert "Out of memory on tile" in out and "poplar::graph_memory_allocation_error" in out
    assert "To fit, try: a smaller micro-batch (now 4)" in out
    assert "g16-b4-pod16 (mk1) does not fit in IPU memory" in err


@pytest.mark.parametrize("args, words", [
    (["--micro-batch", "two"], "--micro-batch 'two' is not a whole number"),
    (["--ipus-per-replica", "3"], "--ipus-per-replica 3 is not a power of two"),
    (["--system", "POD32,POD64"], "--system 'POD32' is not one of"),
    (["--set", "data.micro_bach=2"], "--config g16-b4-pod16 --set data.micro_bach=2: "),
    (["--global-batch", "1000"], "--global-batch 1000 is not a multiple of --micro-batch 3 x 8 replicas = 24"),
])
def test_bad_values_exit_2_naming_the_flag(args, words, capsys):
    assert predict.main(["predict", "--config", "g16-b4-pod16", *args]) == 2
    assert words in capsys.readouterr().err


def test_profile_of_a_config_and_no_sweep(tmp_path, capsys):
    assert predict.main(["profile", "--config", "g16-b4-pod16", "--micro-batch", "2", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "profile_g16-b4-pod16_mk2.png").exists()
    assert predict.main(["profile", "--config", "g16-b4-pod16", "--micro-batch", "2,3"]) == 2
    assert "profile takes one configuration, but --micro-batch has 2 values" in capsys.readouterr().err


def test_a_preset_alone_is_predicted_as_it_is(monkeypatch):
    seen = []
    monkeypatch.setattr(predict, "predict_presets", lambda names, chip, *rest: seen.append((names, chip)) or 0)
    for argv in (["predict", "--preset", "g16-b4-pod16", "--chip", "bow"], ["predict", "--all"]):
        assert predict.main(argv) == 0
    assert seen == [(["g16-b4-pod16"], "bow"), (sorted(predict.PRESETS), None)]


def test_all_takes_no_plan_options(capsys):
    assert predict.main(["predict", "--all", "--micro-batch", "2"]) == 2
    assert "--all takes no plan options" in capsys.readouterr().err


def test_a_config_of_your_own_network_asks_for_onnx(capsys):
    assert predict.main(["predict", "--config", "dense", "--set", "model.onnx=my.onnx"]) == 2
    assert "model.onnx=my.onnx is your own network: add --onnx my.onnx" in capsys.readouterr().err


def test_validate_ops_prints_each_kind_against_poplibs_table_as_json(capsys):
    assert predict.main(["validate", "--ops", "--chip", "mk2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    kinds = {k["kind"]: k for k in out["kinds"]}
    assert {"1x1", "conv strided", "depthwise strided", "matmul", "reduction"} <= set(kinds)
    assert all(k["chip"] == "mk2" for k in out["kinds"])
    unexpressed = [r for r in out["rows"] if r["model"] is None]
    assert [r["benchmark"] for r in unexpressed] == ["conv_5x200_1_in_100_out_bs1440"]
    assert "expandDims" in unexpressed[0]["reason"]


@pytest.mark.parametrize("args, words", [(["--ops", "--chip", "bow"], "mk1 and mk2 only"),
                                         (["--ops", "--sensitivity"], "drop --sensitivity")])
def test_validate_ops_refuses_what_the_table_cannot_answer(args, words, capsys):
    assert predict.main(["validate", *args]) == 2
    assert words in capsys.readouterr().err
