"""A study's results: per-group means over seeds, ``results.md``, the pictures, and ``docs/studies.md``.

Only the rows at each group's chosen learning rate count as results (a sweep's other candidates
appear in the sweep table). Means and standard deviations are over seeds (sample standard
deviation, n - 1); a run that never reached the target accuracy is left out of the time-to-target
means, and the tables say how many of the seeds reached it.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from launch.study import plots as study_plots
from launch.study.grid import Group, Study, choose_lr, groups, scaling_source, sweep_candidates
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

    def values(self, key: str) -> list[float]:
        return [float(r[key]) for r in self.rows if r.get(key) is not None and math.isfinite(float(r[key]))]

    def mean(self, key: str) -> float:
        v = self.values(key)
        return float(np.mean(v)) if v else math.nan

    def std(self, key: str) -> float:
        v = self.values(key)
        return float(np.std(v, ddof=1)) if len(v) > 1 else math.nan

    @property
    def reached(self) -> int:
        return len(self.values("updates_to_target"))


def retarget(study: Study, rows: list[dict]) -> list[dict]:
    """The rows with their time-to-target fields for the study's current target accuracy."""
    return [{**r, **to_target(r, study.target_accuracy)} if r.get("status") == "ok" else r for r in rows]


def summarise(study: Study, rows: list[dict]) -> list[Summary]:
    rows = retarget(study, rows)
    out, chosen = [], {}
    for g in groups(study):
        mine = [r for r in rows if r["id"].startswith(g.key + "/")]
        lr, note = _chosen(study, g, mine, chosen)
        chosen[g.key] = lr
        ok = tuple(sorted((r for r in mine if r.get("status") == "ok" and r["lr"] == lr), key=lambda r: r["seed"]))
        # failures at the chosen rate; a sweep candidate that failed shows in the sweep table
        out.append(Summary(g, lr, note, ok, sum(1 for r in mine if r.get("status") != "ok" and r.get("lr") == lr)))
    return out


def _chosen(study: Study, g: Group, rows: list[dict], chosen: dict) -> tuple[float | None, str]:
    """The group's rate as the study run decides it: a sweep's winner, or the fixed or scaled rate
    (from the source arm's chosen rate for ``from_arm``)."""
    rule = g.arm.lr
    if not rows:
        return None, "not run"
    if rule.factors:
        pick = choose_lr([r for r in rows if r.get("phase") == "sweep"])
        if pick is None:
            return None, "sweep: no candidate finished"
        return pick[0], "sweep" + (" (edge)" if pick[1] else "")
    base_lr, base_batch, source = scaling_source(study, g, chosen)
    note = rule.rule + (f" from {rule.from_arm}" if rule.from_arm else "")
    if source and base_lr is None:
        return None, note + ": no rate to scale from"
    return sweep_candidates(study, g, base_lr, base_batch)[0], note


# -- markdown --------------------------------------------------------------------------------
def pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.2f}"


def pm(s: Summary, key: str, scale: float = 100.0, digits: int = 2) -> str:
    m, sd = s.mean(key), s.std(key)
    if not math.isfinite(m):
        return "-"
    text = f"{scale * m:.{digits}f}"
    return text + (f" ± {scale * sd:.{digits}f}" if math.isfinite(sd) else "")


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


def results_table(study: Study, summaries: list[Summary], variant) -> list[str]:
    ref = study.arm(study.reference_arm).label if study.reference_arm else ""
    lines = [f"| arm | batch | micro x accum x replicas | lr | seeds | final val acc % | best val acc % | "
             f"final val loss |{f' Δ vs {ref} (points) |' if ref else ''} reached {100 * study.target_accuracy:.0f} % "
             f"| epochs to target | updates to target | CPU s per run | CPU s to target | {study.pod} s to target "
             f"(predicted) |",
             "|" + " --- |" * (14 + bool(ref))]
    for s in (x for x in summaries if x.group.variant == variant):
        r0 = s.rows[0] if s.rows else {}
        split = f"{r0.get('micro_batch', '-')} x {r0.get('grad_accum', '-')} x {r0.get('replicas', '-')}"
        delta = ""
        if ref:
            other = _reference(study, summaries, s)
            d = s.mean("final_val_accuracy") - other.mean("final_val_accuracy") if other else math.nan
            delta = f" {'-' if not math.isfinite(d) else f'{100 * d:+.2f}'} |"
        lines.append(
            f"| {s.group.arm.label} | {s.group.batch} | {split} | {f'{s.lr:.4g}' if s.lr else '-'} ({s.lr_note}) | "
            f"{len(s.rows)}{f' ({s.failed} failed)' if s.failed else ''} | {pm(s, 'final_val_accuracy')} | "
            f"{pm(s, 'best_val_accuracy')} | {pm(s, 'final_val_loss', 1.0, 4)} |{delta} {s.reached}/{len(s.rows)} | "
            f"{_num(s.mean('epochs_to_target'), 1)} | {_num(s.mean('updates_to_target'))} | {_num(s.mean('cpu_s'))} | "
            f"{_num(s.mean('cpu_s_to_target'))} | {_num(s.mean('pod_s_to_target'), 3)} |")
    return lines


def claim_lines(study: Study, summaries: list[Summary], variant) -> list[str]:
    """The verdict on "claim arm within N points of the reference while the others fall further behind"."""
    if not (study.claim_arm and study.reference_arm):
        return []
    mine = [s for s in summaries if s.group.variant == variant]
    ref = next((s for s in mine if s.group.arm.name == study.reference_arm), None)
    claim = next((s for s in mine if s.group.arm.name == study.claim_arm), None)
    if ref is None or claim is None or not ref.rows or not claim.rows:
        return ["Claim: not measured (missing runs)."]
    base = ref.mean("final_val_accuracy")
    gap = {s.group.arm.label: s.mean("final_val_accuracy") - base for s in mine if s is not ref and s.rows}
    name = claim.group.arm.label
    within = gap[name] >= -study.claim_points / 100
    missing = [s.group.arm.label for s in mine if s is not ref and s is not claim and not s.rows]
    behind = all(gap[k] < gap[name] for k in gap if k != name)
    if not within:
        verdict = "does not hold"
    elif missing:
        verdict = "is not decided (" + ", ".join(missing) + " not measured)"
    else:
        verdict = "holds" if behind else "does not hold"
    gaps = ", ".join(f"{k} {100 * v:+.2f}" for k, v in gap.items())
    seeds = min(len(ref.rows), len(claim.rows))
    return [f"Claim ({name} at batch {claim.group.batch} within {study.claim_points:g} points of "
            f"{ref.group.arm.label} at batch {ref.group.batch}, the others further behind): gaps to the reference "
            f"{gaps} points; within: {'yes' if within else 'no'}; the others measured further behind: "
            f"{'yes' if behind else 'no'} -> **{verdict}** under this schedule (means over {seeds} "
            f"seed{'s' if seeds != 1 else ''}; compare the gaps with the seeds' standard deviations)."]


def sweep_table(study: Study, rows: list[dict]) -> list[str]:
    lines = ["| variant | arm | batch | candidates: final val acc % (seed "
             f"{study.seeds[0]}) | chosen |", "| --- | --- | --- | --- | --- |"]
    for g in groups(study):
        if not g.arm.lr.factors:
            continue
        swept = sorted((r for r in rows if r["id"].startswith(g.key + "/") and r.get("phase") == "sweep"),
                       key=lambda r: r["lr"])
        if not swept:
            lines.append(f"| {g.variant.label} | {g.arm.label} | {g.batch} | not run | - |")
            continue
        pick = choose_lr(swept)
        cells = ", ".join(f"{r['lr']:.4g}: " + (pct(r["final_val_accuracy"]) if r.get("status") == "ok"
                                                 else "failed") for r in swept)
        chosen = "-" if pick is None else f"{pick[0]:.4g}" + (" (at an end: widen the sweep)" if pick[1] else "")
        lines.append(f"| {g.variant.label} | {g.arm.label} | {g.batch} | {cells} | {chosen} |")
    return lines if len(lines) > 2 else []


def points_table(study: Study, rows: list[dict]) -> list[str]:
    lines = [f"| point | final val acc % | best val acc % | updates | updates to target | epochs to target | "
             f"CPU s | CPU s to target | {study.pod} step ms (predicted) | {study.pod} s to target (predicted) |",
             "|" + " --- |" * 10]
    for r in sorted((r for r in retarget(study, rows) if r.get("status") == "ok"), key=lambda r: r["id"]):
        lines.append(f"| {r['id']} | {pct(r['final_val_accuracy'])} | {pct(r['best_val_accuracy'])} | "
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
    summaries = summarise(study, rows)
    meta = read_meta(out)
    ok = [r for r in rows if r.get("status") == "ok"]
    cpu = sum(r.get("cpu_s") or 0.0 for r in rows)
    text = [f"{h} {study.title}", "", study.about, ""] if study.about else [f"{h} {study.title}", ""]
    text += _setup_lines(study, rows, meta, cpu, len(ok))
    for variant in study.variants:
        text += ["", f"{h}# {variant.label}" if len(study.variants) > 1 else f"{h}# Results", ""]
        text += results_table(study, summaries, variant)
        claim = claim_lines(study, summaries, variant)
        text += ["", *claim] if claim else []
    if notes:
        text += ["", notes.strip()]
    sweep = sweep_table(study, rows)
    if sweep:
        text += ["", f"{h}# Learning-rate sweeps", "", "Each candidate trained once (first seed); the best final "
                 "validation accuracy was chosen and the other seeds trained at it. The choice is made on the "
                 "validation set the tables report, so the chosen rows are slightly optimistic.", "", *sweep]
    pictures = [(name, link) for name, link in images.items()]
    if pictures:
        text += ["", f"{h}# Pictures", ""] + [f"![{name}]({link})" for name, link in pictures]
    text += ["", f"{h}# Every run", "", *points_table(study, rows)]
    failed = failed_lines(rows)
    if failed:
        text += ["", f"{h}# Failed points", "", *failed]
    return "\n".join(text) + "\n"


def _setup_lines(study: Study, rows: list[dict], meta: dict, cpu: float, ok: int) -> list[str]:
    path = next((local_path(r["config"]["data"]["path"]) for r in rows if r.get("config")), "")
    data = data_description(path) if path and Path(path).exists() else {}
    sessions = meta.get("sessions", [])
    lines = [f"- Runs: {ok} finished, {len(rows) - ok} failed; grid: {len(study.variants)} variant(s), arms "
             + ", ".join(f"{a.label} (batches {', '.join(map(str, a.batches))}; lr {a.lr.mode})" for a in study.arms)
             + f"; seeds {', '.join(map(str, study.seeds))}; base config `{study.base}`.",
             f"- Target accuracy for the time-to-target columns: {100 * study.target_accuracy:.0f} % (checked at each "
             "epoch end, so updates and time to target are those of the first epoch that reached it; CPU s to target "
             "is the run's CPU seconds pro rata by updates)."]
    if data:
        lines.append(f"- Data: `{_shown_path(data['path'])}`: {data['train_images']:,} training and {data['validation_images']:,} "
                     f"validation images {tuple(data['image_shape'])}, {data['classes']} classes.")
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
