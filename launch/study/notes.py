"""A study's hand-written notes (``docs/studies/<study>-notes.md``) under its verdicts.

The notes say what the numbers show; the verdicts are not theirs to state. ``{claim N}`` in the notes
becomes the generated verdict of claim N (``launch.study.verdicts.verdict_phrase``: no stronger than the
verdict), and :func:`check_notes` refuses notes that state a verdict in their own words anywhere else: the
verdict words, and past-tense findings such as "did not" that read as one.
"""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\{claim (\d+)\}")
# verdict words outside a placeholder; "holds" followed by a number is a count ("the plane holds 57 %")
FORBIDDEN = re.compile(r"\b(refuted|undecided|decided|decides|did not|holds(?!\s+[\d.]))\b", re.IGNORECASE)


def check_notes(notes: str) -> list[str]:
    """The lines of ``notes`` that state a verdict outside a ``{claim N}`` placeholder: ``line N: "..."``."""
    bad = []
    for number, line in enumerate(notes.splitlines(), 1):
        found = FORBIDDEN.search(PLACEHOLDER.sub("", line))
        if found:
            bad.append(f'line {number}: "{found.group(0)}" in "{line.strip()[:120]}"')
    return bad


def expand_notes(notes: str, results: dict) -> str:
    """``notes`` with each ``{claim N}`` replaced by claim N's generated verdict (``results``: variant ->
    ``launch.study.verdicts.judge_claims``; the first variant's). A verdict stated in the notes' own words is
    an error naming the line and the fix."""
    from launch.study.verdicts import verdict_phrase

    bad = check_notes(notes)
    if bad:
        raise ValueError("the study notes state verdicts in their own words; write {claim N} where a verdict goes "
                         "(it becomes the generated verdict): " + "; ".join(bad))
    judged = next(iter(results.values()), [])

    def verdict(match: re.Match) -> str:
        n = int(match.group(1))
        if not 1 <= n <= len(judged):
            raise ValueError(f"the study notes name {{claim {n}}}; the study has claims 1 to {len(judged)}")
        r = judged[n - 1]
        return (f'claim {n} ("{r.claim.says or r.claim.region()}", {"primary" if r.claim.primary else "secondary"}): '
                f"**{r.verdict}**, {verdict_phrase(r.verdict)}")

    return PLACEHOLDER.sub(verdict, notes)


__all__ = ["check_notes", "expand_notes"]
