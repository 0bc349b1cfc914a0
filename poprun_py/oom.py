"""Telling an out-of-memory kill from a deliberate SIGKILL: the cgroup's ``oom_kill`` counter.

The kernel counts every OOM kill in the memory cgroup of the killed process: cgroup v2 in
``memory.events`` (``oom_kill N``, hierarchical), cgroup v1 in ``memory.oom_control``. The agent
reads the counter of its own cgroup (its program's too) before starting the program and after it
ended: a SIGKILL with the counter risen was the OOM killer's, one without was sent by a process
(a user, a scheduler, the program itself). Where no counter can be read the answer is unknown.
"""

from __future__ import annotations

import os

CGROUP_ROOT = "/sys/fs/cgroup"  # (paths as strings: the agent imports this, and pathlib costs it 4 ms per instance)


def _read(path) -> str:
    with open(path) as f:
        return f.read()


def _counter_files(proc_cgroup: str, root) -> list[str]:
    """The files that may hold this process's ``oom_kill`` counter, most specific first."""
    files = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2 (unified)
            files += [os.path.join(root, rel, "memory.events"), os.path.join(root, "unified", rel, "memory.events")]
        elif "memory" in controllers.split(","):  # cgroup v1
            files.append(os.path.join(root, "memory", rel, "memory.oom_control"))
    return files


def oom_kill_count(proc_cgroup_path="/proc/self/cgroup", root=CGROUP_ROOT) -> int | None:
    """The OOM kills counted so far in this process's memory cgroup, or None when unreadable (paths: str or Path)."""
    try:
        proc_cgroup = _read(proc_cgroup_path)
    except OSError:
        return None
    for path in _counter_files(proc_cgroup, root):
        try:
            text = _read(path)
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def was_oom_kill(before: int | None, after: int | None) -> bool | None:
    """True when the counter rose between the two readings, False when it did not, None if unknown."""
    if before is None or after is None:
        return None
    return after > before
