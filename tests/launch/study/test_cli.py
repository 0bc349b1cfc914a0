"""``poprun-study`` end to end on the quick variants: every file and picture is made, the
tables hold the fresh seeds' numbers (not the sweep's), finished points are skipped while their provenance
matches and trained again when it does not, a killed study continues, a failing point is recorded, a claim
built to be undecided is, and a study under ``poprun_py`` (2 instances) gives the single-process numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from launch.study.cli import main
from launch.study.grid import count_points, load_study
from launch.study.meta import RESULTS, portable, read_rows
from launch.study.trajectory import load_surface

ROOT = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _one_blas_thread(monkeypatch):
    # numba's thread count is fixed when models/ is imported (at collection): leave NUMBA_NUM_THREADS be
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(name, "1")


@pytest.fixture(scope="module")
def quick1(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "q1"
    assert main(["sgd-vs-adam", "--quick", "--out", str(out)]) == 0
    return out


def _line(md: str, start: str) -> str:
    found = [x for x in md.splitlines() if x.startswith(start)]
    assert len(found) == 1, f"{start!r}: {found}"
    return found[0]


def test_quick_study_makes_every_file(quick1):
    study = load_study("sgd-vs-adam", quick=True)
    rows = read_rows(quick1)
    assert len(rows) == count_points(study) and all(r["status"] == "ok" for r in rows)
    for name in ("results.md", "meta.json", "curves-base.png", "final_accuracy.png", "time_to_target.png",
                 "trajectories.png", "trajectories.npz"):
        assert (quick1 / name).stat().st_size > 0, name
    for png in quick1.glob("*.png"):
        assert png.read_bytes()[:8] == PNG
    surface = load_surface(quick1 / "trajectories.npz")
    assert len(surface["paths"]) == len(study.arm("sgd").batches)
    assert surface["losses"].shape == (4, 4) and np.isfinite(surface["losses"]).all()
    assert all(len(p) >= 3 for p in surface["paths"])  # the start and the recorded updates
    row = rows[0]
    assert row["curve"][-1]["val_accuracy"] == row["final_val_accuracy"]
    assert row["pod"] == "POD16" and row["pod_step_s"] > 0 and row["cpu_s"] > 0


def test_rows_hold_no_absolute_path_of_the_machine(quick1):
    text = (quick1 / RESULTS).read_text()
    assert json.loads(text.splitlines()[0])["config"]["data"]["path"] == "data/fashion-mnist-subset.h5"
    assert str(ROOT) not in text and str(Path.home()) + os.sep not in text
    assert portable({"a": [f"{ROOT}/launch/x.py", f"{Path.home()}/.cache/f.h5", "/data/imagenet.h5"]}) == {
        "a": ["launch/x.py", "~/.cache/f.h5", "/data/imagenet.h5"]}
    for shipped in (ROOT / "docs" / "studies").glob("*/results.jsonl"):
        assert not any(s in shipped.read_text() for s in ("/work/", "/home/", "/tmp/", "/root/")), shipped


def test_tables_hold_the_fresh_seeds_numbers(quick1):
    from launch.study.stats import mean_interval

    study = load_study("sgd-vs-adam", quick=True)
    rows = read_rows(quick1)
    md = (quick1 / "results.md").read_text()
    for arm in study.arms:
        for batch in arm.batches:
            mine = [r for r in rows if r["arm"] == arm.name and r["batch"] == batch]
            fresh = [r for r in mine if r["phase"] == "seeds"]
            assert sorted(r["seed"] for r in fresh) == list(study.seeds) and len({r["lr"] for r in fresh}) == 1
            assert all("test_accuracy" not in r for r in mine if r["phase"] == "sweep")  # the test split: chosen only
            chosen = fresh[0]["lr"]
            line = _line(md, f"| {arm.label} | {batch} |")
            for key in ("final_val_accuracy", "test_accuracy"):
                i = mean_interval([r[key] for r in fresh])  # the sweep's run at the chosen rate is not among them
                assert f"{100 * i.mean:.2f} ± {100 * i.sd:.2f} [{100 * i.low:.2f}, {100 * i.high:.2f}]" in line
            assert f"| {chosen:.4g} (sweep" in line
            sweep = _line(md, f"| base | {arm.label} | {batch} |")
            for r in mine:
                if r["phase"] == "sweep":
                    assert f"{r['lr']:.4g}: {100 * r['final_val_accuracy']:.2f}" in sweep
    for r in rows:
        assert f"| {100 * r['final_val_accuracy']:.2f} |" in _line(md, f"| {r['id']} |")
        assert r["run_dir"] == f"points/{r['id']}" and len(r["commit"]) == 40 and len(r["data_sha256"]) == 64
    adam8 = [r["final_val_accuracy"] for r in rows if r["arm"] == "adam" and r["batch"] == 8 and r["phase"] == "seeds"]
    assert adam8, "the reference arm's rows exist"


def test_finished_points_are_skipped_and_a_killed_study_continues(quick1):
    path = quick1 / RESULTS
    lines = path.read_text().splitlines()
    assert main(["sgd-vs-adam", "--quick", "--out", str(quick1)]) == 0
    assert path.read_text().splitlines() == lines  # nothing trained again
    before = {r["id"]: r for r in map(json.loads, lines)}
    path.write_text("\n".join(lines[:-3]) + "\n" + lines[-3][:40])  # killed: 3 rows lost, one torn
    assert main(["sgd-vs-adam", "--quick", "--out", str(quick1)]) == 0
    after = {r["id"]: r for r in read_rows(quick1)}
    assert after.keys() == before.keys()
    for key, row in before.items():  # the runs are deterministic: rerun points give the same numbers
        assert after[key]["final_val_accuracy"] == row["final_val_accuracy"]
        assert after[key]["final_val_loss"] == pytest.approx(row["final_val_loss"], abs=1e-6)


def _tiny_studies(tmp_path: Path, arms: dict, replicas: int = 2, **over) -> Path:
    import yaml

    spec = {"t": {"base": "dense", "data": "fashion-mnist-subset", "seeds": [1], "target_accuracy": 0.1,
                  "batches": [8], "replicas": replicas, "validation_fraction": 0.2,
                  "set": {"model.options": {"hidden": [8]}, "run.epochs": 0.01, "run.checksum_every": 0,
                          "schedule.warmup_steps": 2},
                  "arms": arms, **over}}
    path = tmp_path / "studies.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_progress_count_follows_the_plan_not_the_rows_on_record(tmp_path, caplog):
    # rows of seeds at a rate the sweep no longer chooses stay on record; the count must not take them in
    studies = _tiny_studies(tmp_path, {"sgd": {"set": {"optim.name": "sgd"}, "lr": {"base_lr": 0.1, "factors": [0.5, 1]}}})
    out = tmp_path / "out"
    assert main(["t", "--studies", str(studies), "--out", str(out)]) == 0
    lines = (out / RESULTS).read_text().splitlines()
    seed = json.loads(lines[-1])
    assert seed["phase"] == "seeds" and len(lines) == 3
    other = 0.1 if seed["lr"] == 0.05 else 0.05
    orphan = {**seed, "id": seed["id"].replace(f"lr{seed['lr']:.4g}", f"lr{other:.4g}"), "lr": other}
    (out / RESULTS).write_text("\n".join([*lines[:-1], json.dumps(orphan)]) + "\n")  # the chosen seed to train again
    with caplog.at_level("INFO", logger="launch.study"):
        assert main(["t", "--studies", str(studies), "--out", str(out)]) == 0
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Point ")]
    assert len(progress) == 1 and progress[0].startswith("Point 3/3 seeds") and "0 left after it" in progress[0]
    assert "3 points (3 rows already on record)" in caplog.text
    points = (out / "results.md").read_text()
    assert f"| {orphan['id']} (superseded: the sweep chose another rate) | seeds |" in points
    assert f"| {seed['id']} | seeds |" in points


def test_a_failing_point_is_recorded_and_the_study_goes_on(tmp_path):
    studies = _tiny_studies(tmp_path, {"bad": {"set": {"optim.betas": [0.9]}, "lr": 0.1},
                                       "good": {"set": {"optim.name": "sgd"}, "lr": 0.1}})
    out = tmp_path / "out"
    assert main(["t", "--studies", str(studies), "--out", str(out)]) == 0
    rows = {r["arm"]: r for r in read_rows(out)}
    assert rows["bad"]["status"] == "failed" and "optim.betas" in rows["bad"]["error"]
    assert rows["good"]["status"] == "ok"
    md = (out / "results.md").read_text()
    assert "## Failed points" in md and "optim.betas" in md


def test_large_batch_quick_scales_sgd_from_the_baseline_and_states_the_claim(tmp_path):
    out = tmp_path / "q2"
    assert main(["lars-large-batch", "--quick", "--out", str(out)]) == 0
    rows = read_rows(out)
    assert len(rows) == count_points(load_study("lars-large-batch", quick=True))
    base = next(r for r in rows if r["arm"] == "baseline" and r["phase"] == "seeds" or
                r["arm"] == "baseline" and r["lr"] == max(x["lr"] for x in rows if x["arm"] == "baseline"))
    sweep = [r for r in rows if r["arm"] == "baseline"]
    best = max((r for r in sweep if r["status"] == "ok"), key=lambda r: (r["final_val_accuracy"], -r["final_val_loss"]))
    sgd = next(r for r in rows if r["arm"] == "sgd")
    assert sgd["lr"] == pytest.approx(8 * best["lr"])  # linear scaling from batch 8 to 64
    assert base is not None
    md = (out / "results.md").read_text()
    assert ("Claim 1 (primary): LARS (eta 0.001) at 8B is within 1 point of momentum SGD at B, or better (d = LARS eta "
            "0.001, 8B (batch 64) - momentum SGD, B (batch 8), test accuracy; claimed d > -1 points): not measured") in md
    assert md.count("-> **undecided**") == 4  # one fresh seed: no interval, no decision
    fresh = [r for r in rows if r["phase"] == "seeds" and r["status"] == "ok"]
    from launch.study.paired import decode

    for r in fresh:  # each fresh seed's predicted class per test image, as its test accuracy was measured
        assert r["test_predictions"]["dtype"] == "uint8" and len(decode(r["test_predictions"])) == r["test_images"]
    assert all("test_predictions" not in r for r in rows if r["phase"] == "sweep")
    lars = next(r for r in rows if r["arm"] == "lars")
    assert set(lars["weight_drift"]) >= {"exempt", "classifier.1"} and lars["update_stats"][0]["step"] == 0
    assert (out / "update_stats.png").read_bytes()[:8] == PNG
    assert (out / "curves-base.png").exists() and (out / "time_to_target.png").exists()


@pytest.mark.slow
def test_study_under_the_launcher_matches_one_process(tmp_path):
    studies = _tiny_studies(tmp_path, {"sgd": {"set": {"optim.name": "sgd"}, "lr": 0.1}})
    alone, launched = tmp_path / "alone", tmp_path / "launched"
    assert main(["t", "--studies", str(studies), "--out", str(alone)]) == 0
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("POPDIST_", "POPRUN_", "PMI_")) or k == "POPRUN_WISDOM"}
    env.update(PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "poprun_py", "--num-instances", "2", "--num-replicas", "2",
                           sys.executable, "-m", "launch.study", "t", "--studies", str(studies), "--out",
                           str(launched)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    a, b = read_rows(alone)[0], read_rows(launched)[0]
    assert b["status"] == "ok" and b["instances"] == 2
    assert b["final_val_accuracy"] == a["final_val_accuracy"]
    assert b["final_val_loss"] == pytest.approx(a["final_val_loss"], abs=1e-6)


def test_seeds_option_restricts_and_names_the_fix(tmp_path):
    assert main(["sgd-vs-adam", "--quick", "--seeds", "0", "--out", str(tmp_path)]) == 2  # the sweep seed is no fresh seed
    assert main(["sgd-vs-adam", "--quick", "--seeds", "0,7", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / RESULTS).exists()


def test_docs_carry_the_tables_pictures_and_the_rows_behind_them(quick1, tmp_path, monkeypatch):
    import shutil

    monkeypatch.chdir(tmp_path)  # --docs reads each study's default folder, runs/studies/NAME-quick
    shutil.copytree(quick1, tmp_path / "runs" / "studies" / "sgd-vs-adam-quick")
    doc = tmp_path / "docs" / "studies.md"
    assert main(["sgd-vs-adam", "--quick", "--studies", str(ROOT / "launch" / "study" / "studies.yml"), "--docs", str(doc)]) == 0
    text = doc.read_text()
    assert "generated by `poprun-study" in text and "(studies/sgd-vs-adam/final_accuracy.png)" in text
    kept = tmp_path / "docs" / "studies" / "sgd-vs-adam"
    assert (kept / RESULTS).read_text() == (quick1 / RESULTS).read_text()
    assert json.loads((kept / "meta.json").read_text()) == json.loads((quick1 / "meta.json").read_text())
    assert (kept / "final_accuracy.png").read_bytes()[:8] == PNG


def test_a_claim_built_to_be_undecided_is_undecided(tmp_path):
    # two identical arms on the same fresh seeds: d is 0 exactly and its interval has width wherever the seeds differ
    same = {"set": {"optim.name": "sgd", "optim.momentum": 0.0}, "lr": 0.05}
    studies = _tiny_studies(tmp_path, {"a": same, "b": same}, seeds=[1, 2],
                            claims=[{"arm": "b", "reference": "a", "above": 0, "says": "b beats a", "primary": True}])
    out = tmp_path / "out"
    assert main(["t", "--studies", str(studies), "--out", str(out)]) == 0
    acc = [r["test_accuracy"] for r in read_rows(out) if r["arm"] == "a"]
    assert len(acc) == 2 and acc[0] != acc[1]  # the seeds differ, so the interval is not a point
    md = (out / "results.md").read_text()
    line = _line(md, "- Claim 1 (primary): b beats a")
    assert "+0.00 points, 95 % interval [-" in line and "-> **undecided**: the measurements do not decide it" in line
    assert "Paired on the same 2,000 test images: bootstrap over images and seeds +0.00 points" in md


def test_a_row_whose_provenance_changed_trains_again(tmp_path, monkeypatch, caplog):
    # the code state is fixed here (the tree may change while the suite runs); code_state has its own test
    monkeypatch.setattr("launch.study.cli.code_state", lambda root: {"commit": "c" * 40, "dirty": False,
                                                                      "diff_sha256": ""})
    studies = _tiny_studies(tmp_path, {"sgd": {"set": {"optim.name": "sgd"}, "lr": 0.1}}, seeds=[1, 2])
    out = tmp_path / "out"
    assert main(["t", "--studies", str(studies), "--out", str(out)]) == 0
    lines = (out / RESULTS).read_text().splitlines()
    edited = json.loads(lines[0])
    true_hash = edited["data_sha256"]
    edited["data_sha256"] = "0" * 64  # as if the row came from another dataset file
    (out / RESULTS).write_text("\n".join([json.dumps(edited), *lines[1:]]) + "\n")
    with caplog.at_level("WARNING", logger="launch.study"):
        assert main(["t", "--studies", str(studies), "--out", str(out), "--reuse-stale"]) == 0
    assert (out / RESULTS).read_text().splitlines() == [json.dumps(edited), *lines[1:]]  # reused, loudly
    assert (f"REUSING A STALE ROW (--reuse-stale): point {edited['id']} differs from now in data sha256 "
            f"{'0' * 12} (now {true_hash[:12]})") in caplog.text
    assert "(stale, reused)" in (out / "results.md").read_text()
    assert main(["t", "--studies", str(studies), "--out", str(out)]) == 0
    after = (out / RESULTS).read_text().splitlines()
    assert len(after) == len(lines) + 1  # that point alone trained again
    again = json.loads(after[-1])
    assert again["id"] == edited["id"] and again["data_sha256"] == true_hash
    assert again["final_val_accuracy"] == edited["final_val_accuracy"]  # the same run, deterministic


def test_full_fashion_mnist_missing_is_an_error_naming_the_package(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("POPRUN_FASHION_MNIST_DIR", str(tmp_path))  # no IDX files here
    with caplog.at_level("ERROR", logger="launch.study"):
        assert main(["sgd-vs-adam", "--out", str(tmp_path / "out"), "--seeds", "1"]) == 2
    assert "apt-get install dataset-fashion-mnist" in caplog.text and "fashion-mnist-subset" in caplog.text
    assert not (tmp_path / "out" / RESULTS).exists()


def test_a_resumed_run_carries_the_cpu_seconds_of_its_first_part(tmp_path):
    from launch.train import checkpoint as ckpt
    from launch.train.cli import main as train

    run = tmp_path / "run"
    common = ["--config", "dense", "--set", "data.replicas=1", "--set", "run.epochs=0.05", "--set",
              "run.progress_bar=false", "--set", "run.plots=false", "--set", "run.tensorboard=false", "--set",
              f"run.run_dir={run}", "--set", "schedule.warmup_steps=2", "--set", "run.keep_checkpoints=5",
              "--set", "run.update_stats_every=4"]
    assert train([*common, "--set", "run.max_steps=28"]) == 0  # the first part: 28 of the 31 updates
    first = ckpt.load_checkpoint(ckpt.find_latest(run))[1]
    assert first["engine_step"] == 28 and first["cpu_s"] > 0
    assert train([*common, "--resume", "auto"]) == 0
    last = ckpt.load_checkpoint(ckpt.find_latest(run))[1]
    assert last["engine_step"] == 31 and last["cpu_s"] > first["cpu_s"]  # 3 more updates add to the first part's
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    # the update statistics of both parts: the first part's up to its checkpoint, the second's after it
    assert [r["step"] for r in records if r["event"] == "update_stats"] == list(range(0, 31, 4))


def test_a_quick_report_says_first_that_it_is_a_smoke_test_with_its_own_data_and_batches(quick1):
    lines = (quick1 / "results.md").read_text().splitlines()
    assert lines[0] == "# Smoke test of the pipeline, not evidence: Study 1. Small batch: plain SGD against Adam (--quick)"
    assert lines[2].startswith("`poprun-study sgd-vs-adam --quick` checks that the study runs end to end on a tiny "
                               "grid; its numbers are not evidence")
    assert "Its own data: `fashion-mnist-subset`; SGD: batches 8, 32; Adam: batches 8, 32; seeds 1, 2;" in lines[2]
    assert "full Fashion-MNIST" not in "\n".join(lines)  # the full study's description is not there
