"""Process-tree helpers the agent leans on at every instance's end: the children lists, the
walk that only starts when something is left, reaping with a bound, the private folder."""

import json
import os
import stat
import subprocess
import sys

from poprun_py.agent import _private_dir
from poprun_py.processes import own_children, reap

# A child that waits on its stdin: it ends when the test closes the pipe, never by a timer.
WAIT_STDIN = [sys.executable, "-c", "import sys; sys.stdin.read()"]
# A child that starts a grandchild waiting the same way and prints its pid.
WITH_GRANDCHILD = [sys.executable, "-c",
                   "import subprocess, sys; g = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],"
                   " stdin=subprocess.PIPE); print(g.pid, flush=True); sys.stdin.read(); g.stdin.close(); g.wait()"]


def test_own_children_lists_this_process_children_and_only_them():
    child = subprocess.Popen(WAIT_STDIN, stdin=subprocess.PIPE)
    try:
        assert child.pid in own_children()
        assert os.getpid() not in own_children()
    finally:
        child.stdin.close()
        child.wait()
    assert child.pid not in own_children()


CHECK_TREE = f"""
import json, subprocess, sys
from poprun_py.processes import descendants
spared = subprocess.Popen({WAIT_STDIN!r}, stdin=subprocess.PIPE)
alone = [p.pid for p in descendants(spare=(spared.pid,))]
other = subprocess.Popen({WITH_GRANDCHILD!r}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
grandchild = int(other.stdout.readline())
print(json.dumps({{"alone": alone, "spare": sorted(p.pid for p in descendants(spare=(spared.pid,))),
                  "all": sorted(p.pid for p in descendants()),
                  "expect_spare": sorted([other.pid, grandchild]),
                  "expect_all": sorted([spared.pid, other.pid, grandchild])}}))
other.stdin.close(); other.wait(); spared.stdin.close(); spared.wait()
"""


def test_descendants_skip_the_spared_child_and_find_a_grandchild_below_another():
    # in a fresh process: a test worker may have children of its own
    out = subprocess.run([sys.executable, "-c", CHECK_TREE], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["alone"] == []  # the kernel's children lists answer: nothing but the spared child
    assert got["spare"] == got["expect_spare"]
    assert got["all"] == got["expect_all"]


def test_reap_returns_true_for_an_ended_child_and_false_for_one_still_running():
    child = subprocess.Popen(WAIT_STDIN, stdin=subprocess.PIPE)
    assert reap(child.pid, timeout=0.05) is False  # still waiting on its stdin
    child.stdin.close()
    assert reap(child.pid, timeout=30.0) is True
    assert reap(child.pid, timeout=0.0) is True  # already reaped: nothing to wait for
    child.returncode = 0  # reaped here, not by Popen


def test_private_dir_is_new_private_and_skips_a_name_taken(tmp_path):
    taken = tmp_path / f"poprun_x_{os.getpid()}_0"
    taken.mkdir()
    path = _private_dir(str(tmp_path), "poprun_x_")
    assert path == str(tmp_path / f"poprun_x_{os.getpid()}_1")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700


def test_the_agent_removes_its_folder_before_dismissing_its_sweeper(tmp_path, monkeypatch):
    """MPICH may SIGKILL an agent at any moment once another rank failed: until the sweeper is told the tree is
    clean, it removes the folder itself, so the agent must have removed it by then."""
    from poprun_py import agent as agent_module
    from poprun_py import env as envc
    from poprun_py.agent_spec import AgentSpec
    from poprun_py.config import validate_config
    from poprun_py.processes import start_sweeper
    from poprun_py.topology import assign_instances

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    config = validate_config(program=("true",), num_instances=1, num_replicas=1)
    spec = AgentSpec.for_job(config, "run", tuple(assign_instances(config)))
    agent = agent_module.Agent(spec, spec.instances[0], ["true"])
    assert os.path.isdir(agent._tmpdir)
    agent._sweeper = start_sweeper(envc.JOB_TOKEN, agent._token, workdir=agent._tmpdir)
    seen = []
    write = os.write

    def recording_write(fd, data):
        if data == b"x":
            seen.append(os.path.exists(agent._tmpdir))
        return write(fd, data)

    monkeypatch.setattr(agent_module.os, "write", recording_write)
    agent.finish()
    assert seen == [False]
    assert not os.listdir(tmp_path)
