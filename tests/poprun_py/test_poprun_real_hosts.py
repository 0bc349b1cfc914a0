"""Multi-host jobs on real hosts: network namespaces with their own addresses, reached over ssh.

Each host runs its own sshd; the launcher gets a hostfile of the hosts' addresses and starts the
job through plain ssh (``netns_cluster.py``), so Hydra's proxies, the agents and the programs run
in the hosts' namespaces and every byte between instances on different hosts crosses TCP.
"""

from __future__ import annotations

import json
import sys

from tests.poprun_py.launcher_helpers import launcher_env, poprun, write_script
from tests.poprun_py.real_hosts import (
    assert_bitwise_equal,
    assert_nothing_left,
    pytestmark_real,
    train_on,

)

pytestmark = pytestmark_real




WHERE = """
import json, os, socket
import numpy as np, psutil, poprun_py as popdist
popdist.init()
total = popdist.get_comm().allreduce(np.array([1.0 + popdist.getInstanceIndex()]), op="sum")
peers = sorted({c.raddr.ip for c in psutil.Process().net_connections("tcp") if c.raddr and c.status == "ESTABLISHED"})
print("where " + json.dumps({"hostname": socket.gethostname(), "env_host": os.environ["POPRUN_HOST"], "sum": total[0],
      "address": [a.address for a in psutil.net_if_addrs()["eth0"] if a.family == socket.AF_INET][0],
      "peers": peers}))
"""


def test_a_job_on_two_hosts_talks_over_tcp_between_their_addresses(two_hosts, tmp_path):
    script = write_script(tmp_path / "where.py", WHERE)
    res = poprun(*two_hosts.launcher_options(), "--num-instances", "2", "--output-tag", "[{host}/{instance}] ",
                 sys.executable, script, env=launcher_env())
    assert res.returncode == 0, res.stderr
    seen = {}
    for line in res.stdout.splitlines():
        tag, _, body = line.partition(" where ")
        seen[tag] = json.loads(body)
    assert sorted(seen) == ["[h0/0]", "[h1/1]"]
    for k, (tag, rec) in enumerate(sorted(seen.items())):
        assert rec["hostname"] == two_hosts.names[k]  # the host's own name, its tag in the output
        assert rec["env_host"] == rec["address"] == two_hosts.addresses[k]  # as the hostfile gives it
        assert rec["sum"] == 3.0
        other = two_hosts.addresses[1 - k]
        assert other in rec["peers"], f"instance {k} has no TCP connection to {other}: {rec['peers']}"
    assert_nothing_left(two_hosts)


def test_training_on_two_hosts_ends_bitwise_like_one_host(two_hosts, single_host_run, tmp_path):
    run_dir = tmp_path / "run"
    res = train_on(two_hosts, run_dir, instances=2)
    assert res.returncode == 0, res.stderr[-3000:]
    assert_bitwise_equal(run_dir, single_host_run)
    record = json.loads((run_dir / "logs" / "run.json").read_text())
    assert [i["host"] for i in record["attempts"][0]["instances"]] == ["h0", "h1"]
    assert_nothing_left(two_hosts, run_dir)
