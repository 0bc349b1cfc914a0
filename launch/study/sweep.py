"""A learning-rate sweep's choice: its best candidate, its ties, and the candidate beyond an end.

One evaluation on ``N`` images resolves an accuracy near ``p`` to about one binomial standard error,
``sqrt(p (1 - p) / N)`` (:func:`resolution`). Candidates whose final validation accuracy lies less than
that below the best are **tied** with it (:func:`tied_rates`): a single run each cannot order them. How a
tie is settled is declared in ``studies.yml`` before the runs (``ties``, per study or per arm):

* ``best``: the best single run (exact ties to the lower validation loss), the tie shown beside it,
* ``loss``: the lowest final validation loss among the tied candidates,
* ``keep``: every tied candidate trains on the fresh seeds; a claim on that arm is decided only where
  it comes out the same with each of them (``launch.study.holm``).
"""

from __future__ import annotations

import math

TIE_RULES = ("best", "loss", "keep")


def resolution(accuracy: float, images: int) -> float:
    """One binomial standard error of an accuracy ``accuracy`` measured on ``images`` images (a fraction)."""
    if images < 1 or not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"resolution of accuracy {accuracy!r} on {images!r} images: an accuracy in [0, 1] "
                         "and at least one image")
    return math.sqrt(accuracy * (1.0 - accuracy) / images)


def _finished(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("status") == "ok" and math.isfinite(r.get("final_val_accuracy", math.nan))]


def _best(rows: list[dict]) -> dict:
    return max(rows, key=lambda r: (r["final_val_accuracy"], -r["final_val_loss"]))


def validation_images(row: dict) -> int:
    """The validation split's size of a sweep row: recorded, else from the training images and the fraction."""
    if row.get("validation_images"):
        return int(row["validation_images"])
    f = float(row.get("validation_fraction") or 0.0)
    if not 0.0 < f < 1.0 or not row.get("train_images"):
        return 0
    return int(round(row["train_images"] * f / (1.0 - f)))


def tied_rates(rows: list[dict]) -> list[float]:
    """The candidates within the validation split's resolution of the best (the best included), sorted;
    empty when every candidate failed."""
    ok = _finished(rows)
    if not ok:
        return []
    best = _best(ok)
    images = validation_images(best)
    if not images:
        return [best["lr"]]
    gap = resolution(best["final_val_accuracy"], images)
    return sorted(r["lr"] for r in ok if best["final_val_accuracy"] - r["final_val_accuracy"] < gap)


def choose_lr(rows: list[dict], ties: str = "best") -> tuple[float, bool] | None:
    """The sweep's choice among its rows (one per candidate) under the tie rule ``ties`` (``keep`` chooses as
    ``best`` does: the rate the sweep widens around), and whether it sits at an end of the candidates (the
    sweep may be too narrow). None when every candidate failed."""
    if ties not in TIE_RULES:
        raise ValueError(f"ties={ties!r} must be one of {', '.join(TIE_RULES)}")
    ok = _finished(rows)
    if not ok:
        return None
    best = _best(ok)
    if ties == "loss":
        tied = set(tied_rates(ok))
        best = min((r for r in ok if r["lr"] in tied), key=lambda r: (r["final_val_loss"], -r["final_val_accuracy"]))
    rates = sorted(r["lr"] for r in rows)
    return best["lr"], len(rates) > 1 and best["lr"] in (rates[0], rates[-1])


def chosen_rates(rows: list[dict], ties: str) -> list[float]:
    """The rates that train on the fresh seeds: the choice, or under ``keep`` every tied candidate."""
    pick = choose_lr(rows, ties)
    if pick is None:
        return []
    return tied_rates(rows) if ties == "keep" else [pick[0]]


def widened_candidate(rows: list[dict], pick: tuple[float, bool]) -> float | None:
    """The next candidate beyond the end of a sweep where its best ``pick`` sits (one grid step further,
    the ratio of the two candidates at that end), or None when the best is inside."""
    rates = sorted({r["lr"] for r in rows})
    if not pick[1] or len(rates) < 2:
        return None
    if pick[0] == rates[-1]:
        return float(f"{rates[-1] * rates[-1] / rates[-2]:.6g}")
    return float(f"{rates[0] * rates[0] / rates[1]:.6g}")


__all__ = ["TIE_RULES", "choose_lr", "chosen_rates", "resolution", "tied_rates", "validation_images",
           "widened_candidate"]
