"""Real hosts on one machine (test fixture): network namespaces on a bridge, each running sshd.

``NetnsCluster(folder, count)`` makes ``count`` hosts. Host ``k`` is a network namespace with its
own address (``10.<subnet>.0.<k+2>`` on ``eth0``, one end of a veth pair whose other end is on a
bridge that also carries this machine's ``10.<subnet>.0.1``), its own host name (``h<k>``, a UTS
namespace), its own ``/etc/hosts``, ``/dev/shm`` and boot id (a mount namespace), its own System V IPC, and a real OpenSSH
``sshd`` with a host key and a client key made for the test. The launcher reaches the hosts as on
a cluster: plain ``ssh`` (through a two-line wrapper that adds ``-F`` with the test's client
config, since the user's ``~/.ssh`` is not the test's to change) and a hostfile of the hosts'
addresses. MPI's traffic between hosts then crosses TCP between namespaces.

Faults act on one host: :meth:`kill_host` (every process of the host at once, its sshd too),
:meth:`cut_link` (``ip link set down`` on its end of the veth pair: a partition),
:meth:`shape_link` (``tc``: netem's delay and loss, or tbf's rate limit), :meth:`drop_packets` (nftables:
random loss where the kernel has no netem); :meth:`revive_host` starts a killed host's sshd again and
:meth:`unshape_link` undoes the last two. :meth:`close` leaves nothing: it kills every
process in each namespace, deletes the namespaces (their veth pairs go with them) and the bridge.

``python netns_cluster.py --host-init NAME HOSTS_FILE -- sshd ...`` is run inside each namespace
by the fixture: it names the host, gives it its own ``/etc/hosts`` and ``/dev/shm``, then execs sshd.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

SSHD = "/usr/sbin/sshd"
PREFIX = "pr37"  # names of this fixture's bridges and namespaces: pr37b<subnet>, pr37n<subnet>h<k>
READY_TIMEOUT_S = 30.0


def why_unavailable() -> str | None:
    """None when this machine can run the fixture, else the reason (for ``pytest.skip``)."""
    if os.geteuid() != 0:
        return "real hosts need root (network namespaces, a bridge, sshd)"
    for tool in ("ip", "ssh", "ssh-keygen", "unshare"):
        if shutil.which(tool) is None:
            return f"real hosts need `{tool}` (apt-get install iproute2 openssh-client util-linux)"
    if not os.access(SSHD, os.X_OK):
        return f"real hosts need {SSHD} (apt-get install openssh-server)"
    probe = f"{PREFIX}probe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"network namespaces are not allowed here: `ip netns add` says {made.stderr.strip()!r}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {res.stderr.strip()}")


class NetnsCluster:
    """``count`` hosts h0..h<count-1>, reachable over ssh at :attr:`addresses`."""

    def __init__(self, folder: Path, count: int) -> None:
        self.folder = Path(folder)
        self.count = count
        self.subnet = self._claim_bridge()
        self.bridge = f"{PREFIX}b{self.subnet}"
        self.names = [f"h{k}" for k in range(count)]
        self.addresses = [f"10.{self.subnet}.0.{k + 2}" for k in range(count)]
        self.namespaces = [f"{PREFIX}n{self.subnet}h{k}" for k in range(count)]
        self.veths = [f"{PREFIX}v{self.subnet}h{k}" for k in range(count)]
        self.sshd_pids: list[int] = []
        self.hostfile = self.folder / "hostfile"
        self.ssh = self.folder / "ssh"
        try:
            self._keys_and_configs()
            for k in range(count):
                self._make_host(k)
            self._start_sshds()
        except BaseException:
            self.close()
            raise

    # -- set-up ----------------------------------------------------------------------------------
    def _claim_bridge(self) -> int:
        """A bridge of our own, on a subnet no other cluster (another test worker) uses."""
        for attempt in range(200):
            subnet = 100 + (os.getpid() + attempt) % 150
            bridge = f"{PREFIX}b{subnet}"
            if subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], capture_output=True).returncode == 0:
                _ip("addr", "add", f"10.{subnet}.0.1/24", "dev", bridge)
                _ip("link", "set", bridge, "up")
                return subnet
        raise RuntimeError("no free subnet for a test bridge (200 in use?)")

    def _keys_and_configs(self) -> None:
        f = self.folder
        f.mkdir(parents=True, exist_ok=True)
        for name in ("client_key", "host_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(f / name)], check=True)
        shutil.copy(f / "client_key.pub", f / "authorized_keys")
        host_pub = (f / "host_key.pub").read_text().split()
        (f / "known_hosts").write_text(f"10.{self.subnet}.0.* {host_pub[0]} {host_pub[1]}\n")
        (f / "sshd_config").write_text("\n".join([
            f"HostKey {f / 'host_key'}", f"AuthorizedKeysFile {f / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "PidFile none", "MaxStartups 100", "MaxSessions 100",
            "ClientAliveInterval 1", "ClientAliveCountMax 3", "LogLevel ERROR", "",
        ]))
        (f / "ssh_config").write_text("\n".join([
            "Host *", f"  IdentityFile {f / 'client_key'}", f"  UserKnownHostsFile {f / 'known_hosts'}",
            "  StrictHostKeyChecking yes", "  BatchMode yes", "  LogLevel ERROR", "  ConnectTimeout 5",
            "  ServerAliveInterval 1", "  ServerAliveCountMax 3", "",
        ]))
        self.ssh.write_text(f"#!/bin/sh\nexec ssh -F {shlex.quote(str(f / 'ssh_config'))} \"$@\"\n")
        self.ssh.chmod(0o755)
        self.hostfile.write_text("".join(a + "\n" for a in self.addresses))
        launcher = socket.gethostname()
        (f / "etc_hosts").write_text(
            f"127.0.0.1 localhost\n10.{self.subnet}.0.1 {launcher}\n"
            + "".join(f"{a} {n}\n" for a, n in zip(self.addresses, self.names)))

    def _make_host(self, k: int) -> None:
        ns, veth = self.namespaces[k], self.veths[k]
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{self.addresses[k]}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")

    def _start_sshds(self, hosts: list[int] | None = None) -> None:
        """Start the sshd of each of ``hosts`` (default: all) and wait for each to say it listens
        (sd_notify's READY=1)."""
        hosts = list(range(self.count)) if hosts is None else hosts
        notify = self.folder / "notify.sock"
        notify.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(notify))
        try:
            for k in hosts:
                argv = ["ip", "netns", "exec", self.namespaces[k], "unshare", "--uts", "--ipc", "--mount",
                        "--propagation", "private", "--", sys.executable, os.path.abspath(__file__), "--host-init",
                        self.names[k], str(self.folder / "etc_hosts"), "--",
                        SSHD, "-D", "-e", "-f", str(self.folder / "sshd_config")]
                log = open(self.folder / f"sshd_{self.names[k]}.log", "ab")
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                        env={**os.environ, "NOTIFY_SOCKET": str(notify)}, start_new_session=True)
                log.close()
                if k < len(self.sshd_pids):
                    self.sshd_pids[k] = proc.pid
                else:
                    self.sshd_pids.append(proc.pid)
            ready = 0
            deadline = time.monotonic() + READY_TIMEOUT_S
            while ready < len(hosts):
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    ready += b"READY=1" in sock.recv(4096)
                except socket.timeout:
                    raise RuntimeError(f"{len(hosts) - ready} sshd(s) did not start within {READY_TIMEOUT_S:g} s; "
                                       f"see {self.folder}/sshd_*.log") from None
        finally:
            sock.close()

    def revive_host(self, k: int) -> None:
        """Bring host k back after :meth:`kill_host`: a fresh sshd (and mount namespace) on it."""
        self.kill_host(k)
        try:
            os.waitpid(self.sshd_pids[k], 0)
        except ChildProcessError:
            pass
        self._start_sshds([k])

    # -- use -------------------------------------------------------------------------------------
    def launcher_options(self) -> list[str]:
        """poprun_py's options for a job on every host: the hostfile, and Hydra's ssh with our config."""
        return ["--hostfile", str(self.hostfile), "--mpi-global-args", f"-launcher ssh -launcher-exec {self.ssh}"]

    def pids(self, k: int) -> list[int]:
        res = subprocess.run(["ip", "netns", "pids", self.namespaces[k]], capture_output=True, text=True)
        return [int(p) for p in res.stdout.split()]

    def job_processes(self, k: int) -> list[psutil.Process]:
        """Processes on host k other than its sshd listener (and the fixture's wrappers)."""
        own = set(self.sshd_pids)
        found = []
        for pid in self.pids(k):
            try:
                p = psutil.Process(pid)
                if pid not in own and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.NoSuchProcess:
                pass
        return found

    def shm_files(self, k: int) -> list[str]:
        """What is in host k's own /dev/shm (seen through its sshd's root)."""
        try:
            return sorted(os.listdir(f"/proc/{self.sshd_pids[k]}/root/dev/shm"))
        except OSError:
            return []

    def kill_host(self, k: int) -> None:
        """Every process of host k at once, its sshd too: the host is gone."""
        for pid in self.pids(k):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def cut_link(self, k: int, up: bool = False) -> None:
        _ip("link", "set", self.veths[k], "up" if up else "down")

    def shape_link(self, k: int, qdisc: list[str]) -> str | None:
        """A queueing discipline on host k's side of its link, e.g. ``["netem", "delay", "20ms", "loss",
        "5%"]`` or ``["tbf", "rate", "2mbit", ...]``; None, or why the kernel refuses it."""
        res = subprocess.run(["ip", "netns", "exec", self.namespaces[k], "tc", "qdisc", "replace", "dev", "eth0",
                              "root", *qdisc], capture_output=True, text=True)
        return None if res.returncode == 0 else f"`tc qdisc ... {' '.join(qdisc)}`: {res.stderr.strip()}"

    def unshape_link(self, k: int) -> None:
        """Host k's link as it was: no queueing discipline of ours, no packet dropped on purpose."""
        subprocess.run(["ip", "netns", "exec", self.namespaces[k], "tc", "qdisc", "del", "dev", "eth0", "root"],
                       capture_output=True)
        subprocess.run(["ip", "netns", "exec", self.namespaces[k], "nft", "delete", "table", "inet", PREFIX],
                       capture_output=True)

    def drop_packets(self, k: int, percent: int) -> str | None:
        """Drop ``percent`` % of the packets host k sends and receives, at random (nftables' numgen;
        for kernels without netem); None, or why it cannot."""
        if shutil.which("nft") is None:
            return "no `nft` here (apt-get install nftables)"
        rules = "".join(f"table inet {PREFIX} {{\n  chain lossy_{hook} {{\n    type filter hook {hook} priority 0;\n"
                        f"    {side} eth0 numgen random mod 100 < {percent} drop;\n  }}\n}}\n"
                        for hook, side in (("input", "iifname"), ("output", "oifname")))
        res = subprocess.run(["ip", "netns", "exec", self.namespaces[k], "nft", "-f", "-"], input=rules,
                             capture_output=True, text=True)
        return None if res.returncode == 0 else f"`nft` refuses the rules: {res.stderr.strip()}"

    # -- tear-down -------------------------------------------------------------------------------
    def close(self) -> None:
        procs = []
        for k in range(len(getattr(self, "namespaces", []))):
            procs += [psutil.Process(pid) for pid in self.pids(k) if psutil.pid_exists(pid)]
            self.kill_host(k)
        for pid in self.sshd_pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        psutil.wait_procs(procs, timeout=10)
        for veth, ns in zip(getattr(self, "veths", []), getattr(self, "namespaces", [])):
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if hasattr(self, "subnet"):
            subprocess.run(["ip", "link", "del", f"{PREFIX}b{self.subnet}"], capture_output=True)

    def leftovers(self) -> list[str]:
        """Namespaces, links or processes of this cluster still there (empty after :meth:`close`)."""
        out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        links = [w.rstrip(":").split("@")[0] for line in out.splitlines() for w in line.split()[1:2]]
        spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        return ([f"link {name}" for name in links if name == self.bridge or name in self.veths]
                + [f"namespace {ns}" for ns in spaces if ns in self.namespaces])


def _host_init(name: str, hosts_file: str, command: list[str]) -> None:
    """Inside a new UTS and mount namespace: become host ``name``, then exec ``command`` (sshd)."""
    socket.sethostname(name)
    subprocess.run(["mount", "--bind", hosts_file, "/etc/hosts"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", f"{name}_shm", "/dev/shm"], check=True)
    # A boot id of its own: MPI's transports (UCX) tell machines apart by it, and would otherwise
    # reach a rank on another "host" through this machine's shared memory instead of TCP.
    boot_id = os.path.join(os.path.dirname(hosts_file), f"boot_id_{name}")
    with open(boot_id, "w") as f:
        f.write(str(uuid.uuid4()) + "\n")
    subprocess.run(["mount", "--bind", boot_id, "/proc/sys/kernel/random/boot_id"], check=True)
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation folder
    os.execv(command[0], command)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--host-init"] and sys.argv[4:5] == ["--"]:
        _host_init(sys.argv[2], sys.argv[3], sys.argv[5:])
    else:
        sys.exit("usage: netns_cluster.py --host-init NAME HOSTS_FILE -- command...")
