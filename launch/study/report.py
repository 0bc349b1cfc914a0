"""A study's results: per-group intervals over seeds, the claims' verdicts, ``results.md``, the pictures,
and ``docs/studies.md``.

Only the fresh-seed rows at each group's chosen learning rate count as results: the sweep's runs (the
sweep seed, every candidate, the validation split) appear in the sweep table only. Each result is a mean,
a sample standard deviation (n - 1) and a 95 % t interval over the n fresh seeds (``launch.study.stats``);
a claim's verdict is one of holds, refuted, undecided (``launch.study.claims``). Validation columns are the
split carved from the training images, test columns the file's held-out split. A run that never reached
the target accuracy is left out of the time-to-target means, and the tables say how many seeds reached it.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from launch.study import plots as study_plots
from launch.study.grid import Group, Study, groups, scaling_source, sweep_candidates
from launch.study.stats import Interval, difference_interval, mean_interval
from launch.study.declared import declaration_lines
from launch.study.notes import expand_notes
from launch.study.sweep import choose_lr, chosen_rates, resolution, tied_rates, validation_images
from launch.study.verdicts import claim_lines, judge_claims
from launch.study.meta import META, RESULTS, data_description, local_path, portable, read_meta, read_rows
from launch.study.point import to_target
from launch.study.surface import PICTURE, redraw

RESULTS_MD = "results.md"


@dataclass(frozen=True)
class Summary:
    """One group (variant, arm, batch) at its chosen rate, over seeds."""

    group: Group
    lr: float | None
    lr_note: str
    rows: tuple[dict, ...]
    failed: int
    tie: tuple[float, ...] = ()  # the sweep's candidates tied with its best (launch.study.sweep), when more than one
    role: str = "chosen"  # chosen (a kept tie: each of its rates), or alternate: a tied rate not chosen, with fresh rows

    def values(self, key: str) -> list[float]:
        return [float(r[key]) for r in self.rows if r.get(key) is not None and math.isfinite(float(r[key]))]

    def mean(self, key: str) -> float:
        v = self.values(key)
        return float(np.mean(v)) if v else math.nan

    def std(self, key: str) -> float:
        v = self.values(key)
        return float(np.std(v, ddof=1)) if len(v) > 1 else math.nan

    def interval(self, key: str) -> Interval:
        return mean_interval(self.values(key))

    @property
    def reached(self) -> int:
        return len(self.values("updates_to_target"))


def retarget(study: Study, rows: list[dict]) -> list[dict]:
    """The rows with their time-to-target fields for the study's current target accuracy."""
    return [{**r, **to_target(r, study.target_accuracy)} if r.get("status") == "ok" else r for r in rows]


def summarise(study: Study, rows: list[dict], alternates: bool = False) -> list[Summary]:
    """One summary per group at its chosen rate (a kept tie: one per tied rate); ``alternates``: also one per
    tied rate a ``best`` or ``loss`` rule did not choose that has fresh-seed rows (role ``alternate``)."""
    rows = retarget(study, rows)
    out, chosen = [], {}
    for g in groups(study):
        mine = [r for r in rows if r["id"].startswith(g.key + "/")]
        pick, rates, note = _chosen(study, g, mine, chosen)
        chosen[g.key] = pick
        swept = [r for r in mine if r.get("phase") == "sweep"]
        tie = tuple(tied_rates(swept)) if g.arm.lr.factors else ()
        tie = tie if len(tie) > 1 else ()
        others = [lr for lr in tie if lr not in rates] if alternates else []
        for lr, role in [*((lr, "chosen") for lr in rates or [None]), *((lr, "alternate") for lr in others)]:
            fresh = [r for r in mine if r.get("phase") == "seeds" and r.get("lr") == lr
                     and r.get("seed") in study.seeds_of(g.arm)]
            ok = tuple(sorted((r for r in fresh if r.get("status") == "ok"), key=lambda r: r["seed"]))
            if role == "alternate" and not ok:
                continue
            # failures among the fresh seeds; a sweep candidate that failed shows in the sweep table
            out.append(Summary(g, lr, note, ok, sum(1 for r in fresh if r.get("status") != "ok"), tie, role))
    return out


def _chosen(study: Study, g: Group, rows: list[dict], chosen: dict) -> tuple[float | None, list[float], str]:
    """(the rate later arms scale from, the rates that train on the fresh seeds, how): a sweep's choice under
    its tie rule, or the fixed or scaled rate (from the source arm's chosen rate for ``from_arm``)."""
    rule = g.arm.lr
    if not rows:
        return None, [], "not run"
    if rule.factors:
        swept, ties = [r for r in rows if r.get("phase") == "sweep"], study.ties_of(g.arm)
        pick = choose_lr(swept, ties)
        if pick is None:
            return None, [], "sweep: no candidate finished"
        rates = chosen_rates(swept, ties)
        return pick[0], rates, "sweep" + (" (edge)" if pick[1] else "") + (" (tie kept)" if len(rates) > 1 else "")
    base_lr, base_batch, source = scaling_source(study, g, chosen)
    note = rule.rule + (f" from {rule.from_arm}" if rule.from_arm else "")
    if source and base_lr is None:
        return None, [], note + ": no rate to scale from"
    lr = sweep_candidates(study, g, base_lr, base_batch)[0]
    return lr, [lr], note


# -- markdown --------------------------------------------------------------------------------
def pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.2f}"


def _num(x: float | None, digits: int = 0) -> str:
    """Thousands separated with ``digits`` decimals; small values with 3 significant digits."""
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.{digits}f}" if abs(x) >= 10 or x == 0 else f"{x:.3g}"


def _reference(study: Study, summaries: list[Summary], s: Summary) -> Summary | None:
    if not study.reference_arm or s.group.arm.name == study.reference_arm:
        return None
    same = [r for r in summaries if r.group.variant == s.group.variant and r.group.arm.name == study.reference_arm]
    return next((r for r in same if r.group.batch == s.group.batch), same[0] if same else None)


def interval_text(i: Interval, scale: float = 100.0, digits: int = 2, signed: bool = False) -> str:
    """``mean ± sd [low, high]`` (the interval only from two values on)."""
    if not math.isfinite(i.mean):
        return "-"
    sign = "+" if signed else ""
    text = f"{scale * i.mean:{sign}.{digits}f}"
    if math.isfinite(i.sd):
        text += f" ± {scale * i.sd:.{digits}f} [{scale * i.low:{sign}.{digits}f}, {scale * i.high:{sign}.{digits}f}]"
    return text


def results_table(study: Study, summaries: list[Summary], variant) -> list[str]:
    ref = study.arm(study.reference_arm).label if study.reference_arm else ""
    lines = [f"| arm | batch | micro x accum x replicas | lr (how chosen) | fresh seeds n | validation acc % | "
             f"test acc % |{f' Δ test vs {ref} (points) |' if ref else ''} reached {100 * study.target_accuracy:.0f} % "
             f"(validation) | epochs to target | updates to target | CPU s per run | CPU s to target | {study.pod} s to "
             "target (predicted) |",
             "|" + " --- |" * (13 + bool(ref))]
    for s in (x for x in summaries if x.group.variant == variant):
        r0 = s.rows[0] if s.rows else {}
        split = f"{r0.get('micro_batch', '-')} x {r0.get('grad_accum', '-')} x {r0.get('replicas', '-')}"
        delta = ""
        if ref:
            other = _reference(study, summaries, s)
            d = difference_interval(s.values("test_accuracy"), other.values("test_accuracy")) if other else None
            delta = f" {interval_text(d, signed=True) if d else '-'} |"
        lines.append(
            f"| {s.group.arm.label} | {s.group.batch} | {split} | {f'{s.lr:.4g}' if s.lr else '-'} ({s.lr_note}) | "
            f"{len(s.rows)}{f' ({s.failed} failed)' if s.failed else ''} | {interval_text(s.interval('final_val_accuracy'))} | "
            f"{interval_text(s.interval('test_accuracy'))} |{delta} {s.reached}/{len(s.rows)} | "
            f"{_num(s.mean('epochs_to_target'), 1)} | {_num(s.mean('updates_to_target'))} | {_num(s.mean('cpu_s'))} | "
            f"{_num(s.mean('cpu_s_to_target'))} | {_num(s.mean('pod_s_to_target'), 3)} |")
    return lines


def sweep_table(study: Study, rows: list[dict]) -> list[str]:
    lines = ["| variant | arm | batch | candidates: final validation acc % (sweep seed "
             f"{study.sweep_seed}) | resolution (points) | tied with the best | chosen |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for g in groups(study):
        if not g.arm.lr.factors:
            continue
        swept = sorted((r for r in rows if r["id"].startswith(g.key + "/") and r.get("phase") == "sweep"),
                       key=lambda r: r["lr"])
        if not swept:
            lines.append(f"| {g.variant.label} | {g.arm.label} | {g.batch} | not run | - | - | - |")
            continue
        ties = study.ties_of(g.arm)
        pick, tie = choose_lr(swept, ties), tied_rates(swept)
        cells = ", ".join(f"{r['lr']:.4g}: " + (pct(r["final_val_accuracy"]) if r.get("status") == "ok"
                                                 else "failed") for r in swept)
        best = max((r for r in swept if r.get("status") == "ok"), key=lambda r: r["final_val_accuracy"], default=None)
        res = (f"{100 * resolution(best['final_val_accuracy'], validation_images(best)):.2f}"
               if best and validation_images(best) else "-")
        tied = ", ".join(f"{x:.4g}" for x in tie) + f" (ties: {ties})" if len(tie) > 1 else "none"
        chosen = "-" if pick is None else ", ".join(f"{x:.4g}" for x in chosen_rates(swept, ties)) + (
            " (at an end: widen the sweep)" if pick[1] else "")
        lines.append(f"| {g.variant.label} | {g.arm.label} | {g.batch} | {cells} | {res} | {tied} | {chosen} |")
    return lines if len(lines) > 2 else []


def points_table(study: Study, rows: list[dict], summaries: list[Summary]) -> list[str]:
    lines = [f"| point | phase | final validation acc % | best validation acc % | test acc % | updates | updates to "
             f"target | epochs to target | CPU s | CPU s to target | {study.pod} step ms (predicted) | {study.pod} s to "
             "target (predicted) |", "|" + " --- |" * 12]
    chosen = {(s.group.key, s.lr) for s in summaries}
    keys = {s.group.key for s in summaries if s.lr is not None}
    for r in sorted((r for r in retarget(study, rows) if r.get("status") == "ok"), key=lambda r: r["id"]):
        flags = (" (resumed)" if r.get("resumed") else "") + (" (stale, reused)" if r.get("stale") else "")
        key = r["id"].rsplit("/", 2)[0]
        if r.get("phase") == "seeds" and key in keys and (key, r["lr"]) not in chosen:
            flags += " (superseded: the sweep chose another rate)"
        test = pct(r["test_accuracy"]) if r.get("test_accuracy") is not None else "-"
        lines.append(f"| {r['id']}{flags} | {r.get('phase', '-')} | {pct(r['final_val_accuracy'])} | "
                     f"{pct(r['best_val_accuracy'])} | {test} | "
                     f"{r['updates']} | {r['updates_to_target'] or '-'} | {r['epochs_to_target'] or '-'} | "
                     f"{_num(r['cpu_s'])} | {_num(r.get('cpu_s_to_target') or math.nan)} | "
                     f"{_num(1000 * r['pod_step_s'], 3) if r.get('pod_step_s') else '-'} | "
                     f"{_num(r.get('pod_s_to_target') or math.nan, 3)} |")
    return lines


def failed_lines(rows: list[dict]) -> list[str]:
    bad = sorted((r for r in rows if r.get("status") != "ok"), key=lambda r: r["id"])
    return [f"- `{r['id']}`: {r.get('error', '?')}" for r in bad]


def report_markdown(study: Study, out: Path, rows: list[dict], images: dict[str, str], level: int = 1,
                    notes: str = "") -> str:
    """The study's results as markdown; ``images`` maps picture names to the links to use."""
    h = "#" * level
    every = summarise(study, rows, alternates=True)
    summaries = [s for s in every if s.role == "chosen"]
    meta = read_meta(out)
    ok = [r for r in rows if r.get("status") == "ok"]
    cpu = sum(r.get("cpu_s") or 0.0 for r in rows)
    if study.quick:  # the full study's description would describe runs this one did not make
        text = [f"{h} Smoke test of the pipeline, not evidence: {study.title} (--quick)", "", quick_text(study), ""]
    else:
        text = [f"{h} {study.title}", "", study.about, ""] if study.about else [f"{h} {study.title}", ""]
    text += _setup_lines(study, rows, meta, cpu, len(ok))
    for variant in study.variants:
        text += ["", f"{h}# {variant.label}" if len(study.variants) > 1 else f"{h}# Results", ""]
        text += results_table(study, summaries, variant)
        claim = claim_lines(study, summaries, variant, every)
        text += ["", "Claims (launch/study/studies.yml; the verdict from the difference's 95 % Welch interval: holds "
                 "when it lies inside the claimed region, refuted when outside, else undecided; the primary claim "
                 "alone, the others Holm-corrected as one family; see the declaration line above):", "",
                 *claim] if claim else []
    if notes:
        text += ["", expand_notes(notes, {v: judge_claims(study, summaries, v) for v in study.variants[:1]}).strip()]
    sweep = sweep_table(study, rows)
    if sweep:
        text += ["", f"{h}# Learning-rate sweeps", "", f"Each candidate trained once with the sweep seed "
                 f"{study.sweep_seed}; the best final accuracy on the validation split (carved from the training "
                 "images) was chosen under the arm's tie rule (candidates less than the validation split's resolution, "
                 "one binomial standard error of the best's accuracy, below the best are tied with it), and the chosen "
                 "rate, or under ties: keep each tied rate, trained again on the arm's fresh seeds, which alone make "
                 "the results above (the sweep's runs are not in their means, and their test split is never "
                 "evaluated).", "", *sweep]
    pictures = [(name, link) for name, link in images.items()]
    if pictures:
        text += ["", f"{h}# Pictures", ""] + [f"![{name}]({link})" for name, link in pictures]
    text += ["", f"{h}# Every run", "", *points_table(study, rows, summaries)]
    failed = failed_lines(rows)
    if failed:
        text += ["", f"{h}# Failed points", "", *failed]
    return "\n".join(text) + "\n"


def quick_text(study: Study) -> str:
    """What a ``--quick`` report is, with its own data, batches, seeds and settings."""
    arms = "; ".join(f"{a.label}: batches {', '.join(map(str, a.batches))}" for a in study.arms)
    return (f"`poprun-study {study.name} --quick` checks that the study runs end to end on a tiny grid; its numbers "
            f"are not evidence for or against any claim (a few short runs: wide intervals, verdicts that mean "
            f"nothing). Its own data: `{study.data}`; {arms}; seeds {', '.join(map(str, study.seeds))}; settings "
            f"{', '.join(f'`{o}`' for o in study.overrides) or 'those of the full study'}. The study itself: "
            f"`poprun-study {study.name}` (docs/studies.md).")


def _setup_lines(study: Study, rows: list[dict], meta: dict, cpu: float, ok: int) -> list[str]:
    path = next((local_path(r["config"]["data"]["path"]) for r in rows if r.get("config")), "")
    data = data_description(path, study.validation_fraction, study.split_seed) if path and Path(path).exists() else \
        _data_from_rows(rows)
    sessions = meta.get("sessions", [])
    lines = [f"- Runs: {ok} finished, {len(rows) - ok} failed; grid: {len(study.variants)} variant(s), arms "
             + ", ".join(f"{a.label} (batches {', '.join(map(str, a.batches))}; lr {a.lr.mode}; fresh seeds "
                         f"{_seed_text(study.seeds_of(a))}; ties: {study.ties_of(a)})" for a in study.arms)
             + f"; sweeps with seed {study.sweep_seed}; base config `{study.base}`.",
             f"- Target accuracy for the time-to-target columns: {100 * study.target_accuracy:.0f} % (checked at each "
             "epoch end, so updates and time to target are those of the first epoch that reached it; CPU s to target "
             "is the run's CPU seconds pro rata by updates)."]
    if data:
        what = ("counts from the rows: the file is not on this machine" if data.get("from_rows") else
                f"{data['classes']} classes, images {tuple(data['image_shape'])}")
        shown = data["path"] if data.get("from_rows") else _shown_path(data["path"])
        lines.append(f"- Data: `{shown}` ({what}): {data['train_images']:,} training images; "
                     f"validation: {data['validation_images']:,} carved from the file's training images "
                     f"({study.validation_fraction:g} of each class, split seed {study.split_seed}), every choice made "
                     f"on it; test: the file's {data['test_images']:,} held-out images, evaluated once at the end of "
                     "the fresh-seed runs only.")
    lines += provenance_lines(rows)
    lines += declaration_lines(study, rows)
    lines.append(f"- CPU time: {cpu:,.0f} s ({cpu / 3600:.2f} h) over all runs (process CPU seconds, all threads).")
    for s in sessions:
        m = s.get("machine", {})
        lines.append(f"- Session `{s.get('command', '')}`: started {s.get('started')}, "
                     + (f"wall {s['wall_s'] / 60:.1f} min" if "wall_s" in s else "did not finish (killed or running)")
                     + f"; {m.get('cpu', '?')}, {m.get('cores', '?')} cores, BLAS {m.get('blas', '?')}, threads "
                     f"{m.get('threads', {})}, load average at start {m.get('load_average', ['?'])[0]:.2f}"
                     + (f", at end {s['load_average_end'][0]:.2f}" if "load_average_end" in s else "") + ".")
    loads = [r["load1"] for r in rows if r.get("load1") is not None]
    if loads:
        lines.append(f"- Load average (1 min) when the runs ended: median {np.median(loads):.1f}, max "
                     f"{max(loads):.1f}: the cores were shared, so CPU seconds are noisier than usual.")
    if study.reduced:
        lines.append(f"- Reduced from the full design: {study.reduced}")
    return lines


def provenance_lines(rows: list[dict]) -> list[str]:
    """The code and data the rows came from, and the rows that are resumed or reused stale."""
    commits = sorted({(r.get("commit", "none recorded"), bool(r.get("dirty"))) for r in rows})
    hashes = sorted({r.get("data_sha256") or "none recorded" for r in rows})
    lines = ["- Provenance: commit " + ", ".join(f"`{c[:12]}`" + (" with uncommitted changes" if d else "")
                                               for c, d in commits)
             + "; data SHA-256 " + ", ".join(f"`{h[:16]}`" for h in hashes) + "."]
    resumed = [r["id"] for r in rows if r.get("resumed")]
    if resumed:
        lines.append(f"- Resumed after a kill ({len(resumed)}; CPU seconds summed over both parts): "
                     + ", ".join(f"`{i}`" for i in resumed) + ".")
    stale = [r for r in rows if r.get("stale")]
    if stale:
        lines.append("- Reused with stale provenance (--reuse-stale): " + "; ".join(
            f"`{r['id']}` ({', '.join(r['stale'])})" for r in stale) + ".")
    return lines


def _data_from_rows(rows: list[dict]) -> dict:
    """The Data line's counts from the rows, where the dataset file is not on this machine."""
    from launch.study.sweep import validation_images

    row = next((r for r in rows if r.get("status") == "ok" and r.get("test_images") and r.get("config")), None)
    if row is None:
        return {}
    return {"path": row["config"]["data"]["path"], "train_images": row["train_images"],
            "validation_images": validation_images(row), "test_images": row["test_images"], "from_rows": True}


def _seed_text(seeds) -> str:
    seeds = list(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]} (n = {len(seeds)})"
    return f"{', '.join(map(str, seeds))} (n = {len(seeds)})"


# -- files -----------------------------------------------------------------------------------
def write_report(study: Study, out: Path, rows: list[dict]) -> Path:
    """``out/results.md`` and the pictures next to it."""
    out.mkdir(parents=True, exist_ok=True)
    pictures = study_plots.plot_all(study, summarise(study, rows), out)
    if study.trajectory is not None and redraw(study, out) is not None:
        pictures.append(out / PICTURE)
    links = {p.stem: p.name for p in pictures}
    path = out / RESULTS_MD
    path.write_text(report_markdown(study, out, rows, links))
    return path


def write_docs(studies: list[Study], folders: list[Path], path: Path, command: str) -> Path:
    """One document over several studies' results; pictures, ``results.jsonl`` and ``meta.json``
    copied to ``<path stem>/<study>/`` (so ``--report --out`` that folder rebuilds the tables)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"<!-- generated by `{command}`; edit launch/study/studies.yml, {path.stem}/intro.md or "
             f"{path.stem}/<study>-notes.md, not this file -->", ""]
    intro = path.parent / path.stem / "intro.md"
    if intro.exists():
        parts += [intro.read_text().strip(), ""]
    for study, out in zip(studies, folders):
        rows = read_rows(out)
        if not rows:
            raise ValueError(f"study {study.name!r} has no results in {out}: run poprun-study {study.name}")
        write_report(study, out, rows)
        target = path.parent / path.stem / study.name
        shutil.rmtree(target, ignore_errors=True)  # pictures of an earlier version of the grid go
        target.mkdir(parents=True, exist_ok=True)
        links = {}
        for png in sorted(out.glob("*.png")):
            shutil.copy(png, target / png.name)
            links[png.stem] = f"{path.stem}/{study.name}/{png.name}"
        for data in (RESULTS, META):  # the rows behind the tables, and the sessions, kept with them
            if (out / data).exists():
                shutil.copy(out / data, target / data)
        notes = path.parent / path.stem / f"{study.name}-notes.md"
        parts.append(report_markdown(study, out, rows, links, level=2,
                                     notes=notes.read_text() if notes.exists() else ""))
    path.write_text("\n".join(parts) + "\n")
    return path


__all__ = ["Summary", "report_markdown", "summarise", "write_docs", "write_report"]


def _shown_path(path: str) -> str:
    """A dataset path as the docs show it: relative to the repository when it lies inside it, with
    ``~`` for the home directory (no absolute path of the machine that ran the study)."""
    return portable(str(Path(path).resolve()))
