"""The README is part of the interface: its commands and option table must stay true."""

import os
import re

from poprun_py.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def quick_start_commands() -> list[str]:
    section = readme().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    commands = quick_start_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci_lines = [line.strip() for line in f]
    assert commands[1] in ci_lines


def test_every_launcher_option_is_documented():
    documented = set(re.findall(r"^\| `(-[-\w]+)", readme(), re.M))
    documented |= set(re.findall(r"^\| `-\w`, `(--[\w-]+)", readme(), re.M))
    options = {a.option_strings[-1] for a in build_parser()._actions
               if a.option_strings and a.dest not in ("help", "version")}
    assert options - documented == set()


def test_the_pipelining_snippet_runs(tmp_path, monkeypatch):
    """The README's pipelining example, as printed there (the PNG goes to a temporary folder)."""
    section = readme().split("## Pipelining API and examples", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    monkeypatch.chdir(ROOT)
    code = code.replace('"timeline.png"', repr(str(tmp_path / "timeline.png")))
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_the_example_commands_name_existing_scripts_and_options():
    section = readme().split("## Pipelining API and examples", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", section, re.S)[0].splitlines()
    for line in commands:
        script = re.search(r"python (launch/examples/\w+\.py)", line).group(1)
        assert os.path.exists(os.path.join(ROOT, script)), script
