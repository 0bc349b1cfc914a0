"""The README and the manuals are part of the interface: their commands run as written, from a folder
outside the repository, and the results they print come from those commands.

Which README commands run here: every line of every ```bash block, except
- the two quick-start lines (they install; CI runs the second one verbatim: ``.ci/run``), and
- a block right after a ``<!-- not run: REASON -->`` line (Slurm, several hosts).
They run with the working directory a fresh temporary folder and the test interpreter's bin folder
(the venv's console scripts, its mpiexec) first on ``PATH``. One shortening rule keeps them quick: a
command that trains (``poprun-train`` without ``--print-config``/``--list-keys``/``--list-configs``)
gets ``--set run.max_steps=20``. ``python script.py`` is the README's PopDist script, saved there.
A ```text block after a ``<!-- output of ... -->`` line is what the command before it prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from jit import cpu_model
from poprun_py.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SHORT = "--set run.max_steps=20"
PACKAGES = ("poprun_py", "ipu", "models", "data", "launch", "jit")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    section: str  # the enclosing "## " heading
    marker: str  # the line before the block when it is an HTML comment, else ""


def blocks(path: Path) -> list[Block]:
    found, section, previous = [], "", ""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        if line.startswith("```") and len(line) > 3:
            end = lines.index("```", i + 1)
            marker = previous if previous.startswith("<!--") else ""
            found.append(Block(line[3:].strip(), "\n".join(lines[i + 1:end]), section, marker))
            i, previous = end + 1, "```"
            continue
        if line.strip():
            previous = line.strip()
        i += 1
    return found


def readme_blocks(lang: str, section: str | None = None) -> list[Block]:
    return [b for b in blocks(ROOT / "README.md") if b.lang == lang and section in (None, b.section)]


def commands_to_run() -> list[str]:
    out = []
    for block in readme_blocks("bash"):
        if block.section == "Quick start" or block.marker.startswith("<!-- not run:"):
            continue
        out += [line.strip() for line in block.code.splitlines() if line.strip()]
    return out


def shortened(command: str) -> str:
    trains = re.search(r"\bpoprun-train\b", command) and not re.search(r"--print-config|--list-", command)
    return f"{command} {SHORT}" if trains else command


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("POPDIST_", "POPRUN_", "PMI_", "OMPI_", "SLURM_")) or k == "POPRUN_WISDOM"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)  # the installed packages, not the checkout on the path
    return env


def run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def output_after(path: Path, marker_start: str) -> list[str]:
    """The lines of the ```text block after the ``<!-- output ...`` marker that starts so."""
    (block,) = [b for b in blocks(path) if b.lang == "text" and b.marker.startswith(marker_start)]
    return block.code.splitlines()


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    commands = [b.code.strip() for b in readme_blocks("bash", "Quick start")]
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    with open(ROOT / ".ci" / "run") as f:
        ci_lines = [line.strip() for line in f]
    assert commands[1] in ci_lines


def test_readme_is_short_and_skips_only_what_says_why():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
    markers = [b.marker for b in readme_blocks("bash") if b.marker.startswith("<!-- not run")]
    assert markers and all(re.fullmatch(r"<!-- not run: \S.* -->", m) for m in markers), markers
    assert len(commands_to_run()) >= 8


@pytest.mark.parametrize("command", commands_to_run())
def test_readme_command_runs_from_outside_the_repository(command, tmp_path):
    (script,) = [b.code for b in readme_blocks("python", "A PopDist script")]
    (tmp_path / "script.py").write_text(script + "\n")
    done = run(shortened(command), tmp_path)
    assert (done.stdout + done.stderr).strip()
    if command.endswith("python script.py"):  # the printed block under it
        assert sorted(done.stdout.splitlines()) == sorted(output_after(ROOT / "README.md", "<!-- output of the command above"))


def test_shortening_applies_to_training_only():
    assert shortened("poprun_py --num-instances 2 poprun-train --config dense").endswith(SHORT)
    assert shortened("poprun-train --config dense --print-config") == "poprun-train --config dense --print-config"
    assert shortened("poprun-study sgd-vs-adam --quick") == "poprun-study sgd-vs-adam --quick"


def test_every_launcher_option_is_documented():
    text = (DOCS / "launcher.md").read_text()
    documented = set(re.findall(r"^\| `(-[-\w]+)", text, re.M))
    documented |= set(re.findall(r"^\| `-\w`, `(--[\w-]+)", text, re.M))
    options = {a.option_strings[-1] for a in build_parser()._actions
               if a.option_strings and a.dest not in ("help", "version")}
    assert options - documented == set()


def test_every_environment_variable_of_the_code_is_documented():
    names = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r"\b((?:POPRUN|POPDIST)_[A-Z][A-Z_]*[A-Z])\b", path.read_text()))
    names -= {"POPRUN_PY"}  # the launcher's log tag, not a variable
    text = (DOCS / "environment.md").read_text()
    assert names and {n for n in names if f"`{n}" not in text} == set()


def test_docs_say_what_is_and_hold_no_machine_paths():
    pages = [ROOT / "README.md", *DOCS.glob("*.md"), *DOCS.glob("studies/*.md")]
    for page in pages:
        text = page.read_text()
        assert not re.search(r"\b[Ss]ession[ -]\d|\bat commit\b|\bsession N\b", text), page
        assert not re.search(r"(?<![\w.])/(work|home|tmp|root)/", text), page
        assert not re.search(r"python (?:launch|data|ipu|models|poprun_py)/\S+\.py", text), page  # modules: -m


def test_the_pipelining_snippet_runs_from_any_directory(tmp_path, monkeypatch, capsys):
    """docs/pipelining.md's snippet, as printed there, in a folder outside the repository."""
    (code,) = [b.code for b in blocks(DOCS / "pipelining.md") if b.lang == "python"]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/pipelining.md", "exec"), {})
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "IPU1: FWD.1 FWD.2 FWD.3 FWD.4 RECOMP.1 BWD.1 FWD.5" in capsys.readouterr().out  # as the comment says


def same_output(expected: list[str], actual: list[str], exact: bool) -> bool:
    """Equal lines; off the machine the doc names, numbers may differ by 5 % (float32 sums' last bits)."""
    if exact or len(expected) != len(actual):
        return expected == actual
    number = r"-?\d+\.?\d*"
    for want, got in zip(expected, actual):
        if re.split(number, want) != re.split(number, got):
            return False
        for a, b in zip(map(float, re.findall(number, want)), map(float, re.findall(number, got))):
            if abs(a - b) > 0.05 * max(abs(a), abs(b), 1e-3):
                return False
    return True


def test_the_pipelining_example_prints_what_the_doc_shows(tmp_path):
    marker = "<!-- output of: "
    (block,) = [b for b in blocks(DOCS / "pipelining.md") if b.lang == "text" and b.marker.startswith(marker)]
    command, machine = re.fullmatch(r"<!-- output of: (.*?) \((.*)\) -->", block.marker).groups()
    expected = block.code.splitlines()
    out = run(command, tmp_path).stdout.splitlines()
    actual = out[-len(expected):]
    assert same_output(expected, actual, exact=cpu_model() == machine), "\n".join(["the doc's block is now:", *actual])


def test_same_output_catches_a_changed_figure():
    line = ["[0] validation: loss 0.5111, accuracy 0.8225 on 2000 images"]
    assert same_output(line, ["[0] validation: loss 0.5112, accuracy 0.8230 on 2000 images"], exact=False)
    assert not same_output(line, ["[0] validation: loss 0.5112, accuracy 0.8230 on 2000 images"], exact=True)
    assert not same_output(line, ["[0] validation: loss 0.6111, accuracy 0.8225 on 2000 images"], exact=False)
    assert not same_output(line, ["[0] validation: loss 0.5111, accuracy 0.8225 on 1000 images"], exact=False)


def test_the_data_quick_start_runs_as_printed_and_its_command_too(tmp_path, monkeypatch, capsys):
    """docs/data.md's quick start: its Python block, from a folder outside the repository, and the command
    that runs the complete custom loop it points to (launch/examples/custom_loop.py) under the launcher."""
    (code,) = [b.code for b in blocks(DOCS / "data.md") if b.lang == "python"]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/data.md", "exec"), {})
    assert capsys.readouterr().out.splitlines()[-1] == "(2, 2, 16, 28, 28, 1) uint8 float32 (0, 1) 16"
    (command,) = [b.code for b in blocks(DOCS / "data.md") if b.lang == "bash" and b.section == "Quick start"]
    out = run(command, tmp_path).stdout.splitlines()
    assert out[-1].startswith("[0] validation accuracy ") and out[-1].endswith(" on 2000 images"), out
    losses = [float(line.split("loss ")[1].split()[0]) for line in out if " loss " in line]
    assert len(losses) == 3 and losses[-1] < losses[0] < 2.3  # it learns: below chance (ln 10) and falling
