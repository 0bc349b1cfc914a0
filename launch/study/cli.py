"""Run a batch-size / optimizer study: ``poprun-study NAME [--quick] [--out DIR]`` (``python -m launch.study``).

    poprun-study sgd-vs-adam                                 # the grid of launch/study/studies.yml
    poprun-study sgd-vs-adam --quick                         # a tiny grid, a few updates (the tests)
    poprun_py --num-instances 2 --num-replicas 2 poprun-study sgd-vs-adam
    poprun-study sgd-vs-adam --report                        # tables and pictures from the rows so far
    poprun-study lars-large-batch --power                    # each claim's power for the planned seeds
    poprun-study sgd-vs-adam lars-large-batch --docs docs/studies.md

Every point of the grid is a real training run (``launch.study.point``) written as one JSON row
to ``DIR/results.jsonl`` (default ``runs/studies/NAME``). A point already there is reused when its
row's provenance (git commit and uncommitted changes, the dataset's SHA-256, the resolved
configuration: ``launch.study.provenance``) matches the point as it would train now, else it trains
again (``--reuse-stale`` reuses it with a warning naming what differs). So a killed study continues
where it stopped (a killed point resumes from its last epoch, its CPU seconds summed over both parts);
a point that fails is recorded with its error and the study goes on (``--retry-failed`` runs those again).
Before training it prints each claim's power for the planned seeds (``launch.study.verdicts``).
At the end: the trajectories picture and ``DIR/results.md`` with the pictures (``launch.study.report``).
Under ``poprun_py`` every instance runs the same points; instance 0 decides and writes.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as in launch.train: shared cores, no spinning

import argparse
import json
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

import poprun_py as popdist
from launch.study import meta as study_meta, report as study_report
from launch.study.grid import (STUDIES_FILE, Group, Point, Study, count_points, groups, load_study, make_point,
                               points_in_group, scaling_source, sweep_candidates, with_replicas)
from launch.study.sweep import choose_lr, chosen_rates, widened_candidate
from launch.study.verdicts import power_lines
from launch.study.meta import RESULTS, portable, read_rows
from launch.study.point import point_config, run_point
from launch.study.provenance import code_state, file_sha256, mismatches
from launch.study.surface import make_trajectories
from launch.study.trajectory import SNAPSHOTS_FILE

logger = logging.getLogger("launch.study")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="poprun-study", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="+", metavar="NAME", help="studies in launch/study/studies.yml")
    p.add_argument("--studies", default=str(STUDIES_FILE), metavar="FILE.yml",
                   help="the study definitions (default launch/study/studies.yml)")
    p.add_argument("--quick", action="store_true", help="the study's quick variant: a tiny grid, a few updates")
    p.add_argument("--out", default=None, help="results folder (default runs/studies/NAME[-quick]); one study only")
    p.add_argument("--report", action="store_true", help="only write results.md and the pictures from the rows")
    p.add_argument("--power", action="store_true", help="only print each claim's power for the planned seeds")
    p.add_argument("--docs", default=None, metavar="FILE.md", help="write a document over the named studies' "
                   "results (pictures copied next to it); trains nothing")
    p.add_argument("--seeds", default=None, metavar="S,S,...",
                   help="train only these of the study's fresh seeds (the sweeps train in any case; the other seeds "
                   "in a later run that skips what is done)")
    p.add_argument("--retry-failed", action="store_true", help="train the points recorded as failed again")
    p.add_argument("--reuse-stale", action="store_true",
                   help="reuse recorded points whose provenance (commit, data, config) differs from now, with a "
                   "warning each, instead of training them again")
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dist = popdist.init()
    _setup_logging(args.verbose, dist.instance_index, dist.num_instances)
    if args.out and len(args.names) > 1 and not args.docs:
        logger.error("--out names one folder: give one study name with it (got %s)", ", ".join(args.names))
        return 2
    try:
        studies = [load_study(n, args.quick, Path(args.studies)) for n in args.names]
        folders = [Path(args.out) if args.out and not args.docs else default_out(s) for s in studies]
        if args.docs:
            if dist.instance_index == 0:
                print(study_report.write_docs(studies, folders, Path(args.docs), _command_line(argv)))
            return 0
        for study, out in zip(studies, folders):
            if dist.is_set:
                study = with_replicas(study, dist.num_total_replicas)
            if args.seeds:
                study = only_seeds(study, args.seeds)
            if args.report or args.power:
                if dist.instance_index == 0:
                    print("\n".join(power_lines(study, study_report.summarise(study, read_rows(out)), out)) if args.power
                          else study_report.write_report(study, out, read_rows(out)))
                continue
            run_study(study, out, popdist.get_comm(), dist, args.retry_failed, _command_line(argv), args.reuse_stale)
        return 0
    except ValueError as err:  # bad study file, names or values: the message says what to fix
        logger.error("%s", err)
        return 2


def only_seeds(study: Study, text: str) -> Study:
    """The study restricted to the fresh seeds in ``text`` (the sweeps train with the sweep seed in any case)."""
    try:
        wanted = {int(s) for s in text.split(",") if s.strip()}
    except ValueError:
        raise ValueError(f"--seeds {text!r}: give comma-separated integers, e.g. --seeds 1,2") from None
    unknown = sorted(wanted - set(study.all_seeds))
    if unknown or not wanted:
        raise ValueError(f"--seeds {text!r}: the study {study.name!r} has fresh seeds {list(study.all_seeds)} (the "
                         f"sweep seed {study.sweep_seed} trains the sweeps in any case)")
    arms = tuple(replace(a, seeds=tuple(s for s in study.seeds_of(a) if s in wanted)) for a in study.arms)
    return replace(study, seeds=tuple(s for s in study.seeds if s in wanted), arms=arms)


def default_out(study: Study) -> Path:
    return Path("runs", "studies", study.name + ("-quick" if study.quick else ""))


def _command_line(argv: Sequence[str] | None) -> str:
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["poprun-study", *args])


# loggers quieted to WARNING on the console without -v: the memory report and checkpoint lines
QUIET_LOGGERS = ("launch.train.build", "launch.train.checkpoint", "ipu", "data")


def _setup_logging(verbose: int, index: int, count: int) -> None:
    level = logging.DEBUG if verbose > 1 else logging.INFO if (verbose or index == 0) else logging.WARNING
    logging.basicConfig(level=level, format=f"[{index}/{count}] %(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)
    if not verbose:  # one line per epoch from the runs; the memory report and checkpoint lines only with -v
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


# -- rows shared between instances -------------------------------------------------------
def share(comm, value, lead: bool):
    """Instance 0's JSON-able ``value`` on every instance (a broadcast of its UTF-8 bytes)."""
    data = json.dumps(value).encode() if lead else b""
    size = comm.broadcast(np.array([len(data)], np.int64), root=0)
    buf = np.frombuffer(data, np.uint8).copy() if lead else np.zeros(int(size[0]), np.uint8)
    return json.loads(comm.broadcast(buf, root=0).tobytes().decode())


# -- the study --------------------------------------------------------------------------------
class StudyRun:
    """The state of one study run: the rows so far, the chosen rates, progress and the time left."""

    def __init__(self, study: Study, out: Path, comm, dist, retry_failed: bool, reuse_stale: bool = False) -> None:
        self.study, self.out, self.comm, self.dist = study, out, comm, dist
        self.lead = dist.instance_index == 0
        self.retry_failed, self.reuse_stale = retry_failed, reuse_stale
        self.rows: dict[str, dict] = {r["id"]: r for r in share(comm, read_rows(out) if self.lead else None, self.lead)}
        self.total = count_points(study)
        self.visited = 0  # the plan's points met so far in this invocation, reused or trained
        self.chosen: dict[str, float | None] = {}
        self.data_path = share(comm, study_meta.resolve_data(study) if self.lead else None, self.lead)
        from data.sources import INSTALL_ROOT

        self.provenance = share(comm, {"code": code_state(INSTALL_ROOT), "data_sha256": file_sha256(self.data_path)}
                                if self.lead else None, self.lead)

    def run(self) -> None:
        for group in groups(self.study):
            self.run_group(group)

    def run_group(self, group: Group) -> None:
        study, rule = self.study, group.arm.lr
        seeds, ties = study.seeds_of(group.arm), study.ties_of(group.arm)
        base_lr, base_batch, source = scaling_source(study, group, self.chosen)
        if source and base_lr is None:
            for seed in seeds:
                self.skip(make_point(study, group, rule.base_lr, seed, "seeds"),
                          f"{source} has no chosen rate to scale from")
            self.chosen[group.key] = None
            return
        candidates = sweep_candidates(study, group, base_lr, base_batch)
        if rule.factors:
            swept = [self.execute(make_point(study, group, lr, study.sweep_seed, "sweep")) for lr in candidates]
            pick = choose_lr(swept, ties)
            for _ in range(rule.widen):  # the best at an end: one more candidate beyond it, until it is inside
                extra = None if pick is None else widened_candidate(swept, pick)
                if extra is None:
                    break
                logger.info("%s: the best rate %.4g sits at an end of %s: widening the sweep to %.4g.", group.key,
                            pick[0], sorted(r["lr"] for r in swept), extra)
                candidates = sorted([*candidates, extra])
                self.total += 1  # the progress count: one point more than the grid's
                swept.append(self.execute(make_point(study, group, extra, study.sweep_seed, "sweep")))
                pick = choose_lr(swept, ties)
            self.chosen[group.key] = pick[0] if pick else None
            self.keep_chosen_snapshots(swept, pick[0] if pick else None)
            if pick is None:
                for seed in seeds:
                    self.skip(make_point(study, group, candidates[0], seed, "seeds"), "every sweep candidate failed")
                return
            rates = chosen_rates(swept, ties)
            self.total += len(seeds) * (len(rates) - 1)  # the progress count: a kept tie trains each rate
            logger.info("%s: learning rate %s chosen on the validation split from %s%s (ties: %s).", group.key,
                        ", ".join(f"{r:.4g}" for r in rates), candidates,
                        " (at an end of the candidates)" if pick[1] else "", ties)
        else:
            rates = [candidates[0]]
            self.chosen[group.key] = candidates[0]
        for lr in rates:
            for seed in seeds:  # fresh seeds: the reported runs, the test split evaluated at their end
                self.execute(make_point(study, group, lr, seed, "seeds"))

    def expected(self, point: Point) -> dict:
        """The provenance a row of ``point`` must carry to be reused: the code and data now, its configuration."""
        cfg = point_config(self.study, point, self.data_path, self.out / "points" / point.id, self.dist,
                           self.snapshots_for(point))
        return {**self.provenance, "config": portable(json.loads(json.dumps(cfg.to_dict())))}

    def execute(self, point: Point) -> dict:
        self.visited += 1
        row = self.rows.get(point.id)
        run_dir = self.out / "points" / point.id
        if row is not None and not (self.retry_failed and row.get("status") == "failed"):
            stale = mismatches(row, self.expected(point))
            if not stale:
                return row
            if self.reuse_stale:
                logger.warning("REUSING A STALE ROW (--reuse-stale): point %s differs from now in %s.", point.id,
                               "; ".join(stale))
                row = self.rows[point.id] = {**row, "stale": stale}
                return row
            logger.warning("Point %s trains again: its recorded row differs from now in %s.", point.id, "; ".join(stale))
            if self.lead:
                shutil.rmtree(run_dir, ignore_errors=True)  # no resuming from another version's checkpoints
            self.comm.barrier()
        logger.info("Point %d/%d %s: %s at batch %d (micro %d x accumulation %d x %d replicas), lr %.4g, seed %d; "
                    "%d left after it, %s.", self.visited, self.total, point.phase, point.group.arm.name,
                    point.group.batch, point.micro_batch, point.grad_accum, point.replicas, point.lr, point.seed,
                    self.total - self.visited, _duration(self.eta_s(point)))
        row = run_point(self.study, point, self.data_path, run_dir, self.comm, self.dist, self.snapshots_for(point),
                        self.provenance)
        row["load1"] = os.getloadavg()[0]
        return self.record(row)

    def skip(self, point: Point, why: str) -> None:
        self.visited += 1
        if point.id not in self.rows:
            self.record({"id": point.id, "study": self.study.name, "variant": point.group.variant.label,
                         "arm": point.group.arm.name, "batch": point.group.batch, "seed": point.seed, "lr": point.lr,
                         "phase": point.phase, "status": "failed", "error": f"not run: {why}",
                         **self.provenance["code"], "data_sha256": self.provenance["data_sha256"]})

    def record(self, row: dict) -> dict:
        row = portable(share(self.comm, row, self.lead))
        self.rows[row["id"]] = row
        if self.lead:
            self.out.mkdir(parents=True, exist_ok=True)
            with open(self.out / RESULTS, "a+b") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                    f.write(b"\n")  # a line torn by a kill stays a torn line of its own
                f.write(json.dumps(row).encode() + b"\n")
            if row["status"] == "ok":
                test = f", test accuracy {row['test_accuracy']:.4f}" if row.get("test_accuracy") is not None else ""
                logger.info("  -> final validation accuracy %.4f, loss %.4f%s; %d updates; %.0f CPU s%s.",
                            row["final_val_accuracy"], row["final_val_loss"], test, row["updates"], row["cpu_s"],
                            " (resumed: both parts)" if row.get("resumed") else "")
            else:
                logger.info("  -> failed: %s", row.get("error"))
        return row

    def recorded(self) -> int:
        """Rows on record for this study's groups, also of candidates or seeds the plan no longer reaches."""
        return sum(1 for g in groups(self.study) for _ in self.rows_of(g))

    def rows_of(self, group: Group) -> list[dict]:
        return [r for r in self.rows.values() if r["id"].startswith(group.key + "/")]

    def eta_s(self, current: Point) -> float:
        """Seconds left including ``current``: each remaining run costs the mean wall time of the finished
        runs of its group, else of its batch size in its variant, else of its batch size, else of all."""
        finished = [r for r in self.rows.values() if r.get("status") == "ok" and r.get("wall_s")]
        if not finished:
            return float("nan")

        def estimate(g: Group) -> float:
            for match in (lambda r: r["id"].startswith(g.key + "/"),
                          lambda r: r["batch"] == g.batch and r["variant"] == g.variant.label,
                          lambda r: r["batch"] == g.batch, lambda r: True):
                walls = [r["wall_s"] for r in finished if match(r)]
                if walls:
                    return float(np.mean(walls))
            return 0.0

        return sum(estimate(g) * max(points_in_group(self.study, g) - len(self.rows_of(g)), 0)
                   for g in groups(self.study))

    # -- trajectories ---------------------------------------------------------------------
    def snapshots_for(self, point: Point) -> int:
        spec = self.study.trajectory
        if spec is None or point.group.arm.name != spec.arm or point.seed != spec.seed:
            return 0
        return spec.snapshots if point.group.variant == self.study.variants[0] else 0

    def keep_chosen_snapshots(self, swept: list[dict], lr: float | None) -> None:
        """Only the chosen candidate's weight snapshots are kept (they are the big files)."""
        if not self.lead:
            return
        for row in swept:
            path = self.out / row.get("run_dir", "-") / SNAPSHOTS_FILE
            if row["lr"] != lr and path.exists():
                path.unlink()


def run_study(study: Study, out: Path, comm, dist, retry_failed: bool = False, command: str = "",
              reuse_stale: bool = False) -> Path | None:
    """Train every missing point of ``study`` into ``out``, then the trajectories and the report."""
    lead = dist.instance_index == 0
    started = time.time()
    meta = study_meta.start_meta(study, out, command) if lead else None
    state = StudyRun(study, out, comm, dist, retry_failed, reuse_stale)
    if lead:
        meta["sessions"][-1].update(code=state.provenance["code"], data_sha256=state.provenance["data_sha256"],
                                    split={"validation_fraction": study.validation_fraction,
                                           "split_seed": study.split_seed, "sweep_seed": study.sweep_seed,
                                           "seeds": {a.name: list(study.seeds_of(a)) for a in study.arms}})
    logger.info("Study %s: %d points (%d rows already on record) in %s; data %s.", study.name, state.total, state.recorded(),
                out, state.data_path)
    if lead:
        for line in power_lines(study, study_report.summarise(study, list(state.rows.values())), out):
            logger.info("%s", line)
    state.run()
    if study.trajectory is not None:
        make_trajectories(study, out, list(state.rows.values()), state.chosen, comm, dist,
                                       state.data_path)
    if not lead:
        return None
    study_meta.finish_meta(out, meta, started)
    path = study_report.write_report(study, out, list(state.rows.values()))
    logger.info("Study %s done: %s", study.name, path)
    return path


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "no estimate of the time left until a run finishes"
    return f"about {seconds / 60:.0f} min left" if seconds >= 90 else f"about {seconds:.0f} s left"


if __name__ == "__main__":
    sys.exit(main())
