"""Chaos at scale: host-level faults on real hosts (network namespaces reached over ssh).

    python bench/chaos.py --hosts 4 --faults 50 --seed 0 [--steps 8] [--every 2] [--hang-timeout 8]

Needs root, ``iproute2`` and ``openssh-server`` (the test fixture ``tests/poprun_py/netns_cluster.py``
makes the hosts). One short training job per fault (the ``dense`` model, ``--steps`` updates, a
checkpoint every ``--every``), ``--hosts`` instances x 1 replica each, under ``poprun_py
--max-restarts 2 --hang-timeout H`` and a host policy: ``elastic`` (``--min-instances 2``: a lost host
-> the job goes on with the survivors, the same replicas, more per instance), ``strict``
(``--min-instances`` = every instance: a lost host stops the job) or ``none`` (no ``--min-instances``:
the restarts go to the lost host too). Each fault strikes at a random point (a progress report:
``MPI initialised``, ``step N``, ``checkpoint N: writing|renaming``), where ``POPRUN_FAULT`` freezes
(or kills) the victim's instance; the host-level ones then act on its host and let it go on:

* kill host: every process of the host at once, its sshd too (the host comes back between jobs);
* cut link: ``ip link set down`` on its link (a partition; up again once its instances fenced);
* link delay+loss: ``tc netem delay 20ms loss 5%``; a kernel without netem gets tbf (4 Mbit/s, a
  queue of up to 400 ms) and 5 % random loss through nftables instead, and says so;
* disk full: the run directory's file system (a 16 MiB tmpfs) filled before a checkpoint write;
* SIGKILL instance, SIGSTOP instance (a hang, which ``--hang-timeout`` catches).

Each job is then one of: **recovered** (exit 0, final checkpoint and per-update losses bitwise the
uninterrupted run's, with a restart where the fault calls for one), **stopped** with a correct
message (one line naming the host and the cause, where the policy or the fault rules out going on),
or **other** (a hang, a process left on any host, a file left in any host's /dev/shm or this one's,
a half-written, lost or wrong checkpoint, a wrong result, a stop where recovery was due). The
recovery time runs from the fault (the host killed or cut, the signal sent) to the restarted
attempt's training: its ``Training ...`` line, or its ``Resumed from ...`` line where it loads a
checkpoint. What a killed host itself leaves is not counted (see ``_leftovers``).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import numpy as np
import psutil

import chaos
from poprun_py.faults import INJECTED, Fault
from poprun_py.fence import fence_after
from tests.poprun_py.host_jobs import BackgroundJob, fill, leftovers, program_on
from tests.poprun_py.netns_cluster import NetnsCluster, why_unavailable

KILL_HOST, CUT_LINK, DEGRADE, DISK_FULL = "kill host", "cut link", "link delay+loss", "disk full"
KILL, STOP = "SIGKILL instance", "SIGSTOP instance"
KINDS = (KILL_HOST, CUT_LINK, DEGRADE, DISK_FULL, KILL, STOP)
HOST_LOSS = (KILL_HOST, CUT_LINK)
NETEM = ["netem", "delay", "20ms", "loss", "5%"]
TBF = ["tbf", "rate", "4mbit", "burst", "16kb", "latency", "400ms"]
JOB_TIMEOUT_S = 300.0


@dataclass
class HostFault:
    kind: str
    host: int  # the victim (host k runs instance k)
    at: str  # the progress report it strikes at
    policy: str  # elastic | strict | none

    def describe(self) -> str:
        return f"{self.kind} h{self.host} at {self.at!r} ({self.policy})"


def plan(count: int, seed: int, steps: int, every: int, hosts: int, kinds: tuple[str, ...]) -> list[HostFault]:
    """``count`` faults, the kinds in turn (shuffled), each at a random point of a random host."""
    rng = random.Random(seed)
    order = [kinds[i % len(kinds)] for i in range(count)]
    rng.shuffle(order)
    checkpoints = [f"checkpoint {n}: {what}" for n in range(every, steps + 1, every) for what in ("writing", "renaming")]
    faults = []
    for kind in order:
        host = 0 if kind == DISK_FULL else rng.randrange(hosts)
        points = ["MPI initialised", *(f"step {n}" for n in range(1, steps + 1))] + (checkpoints if host == 0 else [])
        at = f"checkpoint {rng.choice(range(every, steps + 1, every))}: writing" if kind == DISK_FULL else rng.choice(points)
        policy = rng.choices(["elastic", "strict", "none"], [3, 1, 1])[0] if kind in HOST_LOSS else "elastic"
        faults.append(HostFault(kind, host, at, policy))
    return faults


@dataclass
class Outcome:
    fault: HostFault | None
    code: int | None = None
    verdict: str = "other"  # recovered | stopped | other
    attempts: list[str] = field(default_factory=list)
    restart_s: float | None = None  # fault -> the launcher says it restarts
    training_s: float | None = None  # fault -> the restarted attempt resumed training
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    stderr: str = ""


class HostChaos:
    """A cluster, a small disk for the disk-full jobs, the uninterrupted run, and one job per fault."""

    def __init__(self, work: Path, hosts: int, steps: int, every: int, hang_timeout: float) -> None:
        self.work, self.hosts, self.steps, self.every, self.hang = work, hosts, steps, every, hang_timeout
        self.disk = work / "disk"  # mounted before the hosts exist: their mount namespaces see it
        self.disk.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "poprun_chaos_disk", str(self.disk)], check=True)
        try:
            self.cluster = NetnsCluster(work / "cluster", hosts)
        except BaseException:
            subprocess.run(["umount", "-l", str(self.disk)])
            raise
        self.degrade = self._degrade_method()
        self.baseline = work / "baseline"

    def close(self) -> None:
        self.cluster.close()
        subprocess.run(["umount", "-l", str(self.disk)], capture_output=True)

    def _degrade_method(self) -> tuple[str, str | None]:
        """(how this kernel degrades a link, why netem is not used or None); ("", why) if it cannot."""
        refused = self.cluster.shape_link(0, NETEM)
        self.cluster.unshape_link(0)
        if refused is None:
            return "netem delay 20ms loss 5%", None
        why = f"no netem in this kernel ({refused})"
        tbf = self.cluster.shape_link(0, TBF)
        loss = self.cluster.drop_packets(0, 5) if tbf is None else None
        self.cluster.unshape_link(0)
        return ("", f"{why}; {tbf or loss}") if tbf or loss else ("tbf 4mbit + nft 5% loss", why)

    def options(self, policy: str) -> list[str]:
        floor = {"elastic": ["--min-instances", "2"], "strict": ["--min-instances", str(self.hosts)], "none": []}
        return ["--max-restarts", "2", "--hang-timeout", f"{self.hang:g}", *floor[policy]]

    def start(self, run_dir: Path, logs: Path, policy: str, fault: Fault | None) -> BackgroundJob:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POPDIST_", "POPRUN_", "PMI_"))}
        env.update(PYTHONPATH=str(chaos.ROOT), OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", **({"POPRUN_FAULT": fault.encode()} if fault else {}))
        argv = [sys.executable, "-m", "poprun_py", *self.cluster.launcher_options(),
                "--num-instances", str(self.hosts), "--num-replicas", str(self.hosts), "--log-dir", str(logs),
                *self.options(policy), sys.executable, "-m", "launch.train",
                *chaos.train_args(self.steps, self.every), "--set", f"run.keep_checkpoints={self.steps}",
                "--set", f"run.run_dir={run_dir}"]
        return BackgroundJob(argv, cwd=str(chaos.ROOT), env=env)

    def run_baseline(self) -> Outcome:
        out = Outcome(None)
        started = time.perf_counter()
        job = self.start(self.baseline, self.work / "baseline_logs", "elastic", None)
        out.code = job.finish(JOB_TIMEOUT_S)
        out.wall_s, out.stderr = time.perf_counter() - started, job.stderr
        out.problems = leftovers(self.cluster, self.baseline)
        out.verdict = "recovered" if out.code == 0 and not out.problems else "other"
        return out

    # -- one fault -------------------------------------------------------------------------------
    def run(self, n: int, fault: HostFault) -> Outcome:
        out = Outcome(fault)
        run_dir = (self.disk if fault.kind == DISK_FULL else self.work) / f"job{n}"
        logs = self.work / f"job{n}_logs"
        signum = {KILL: signal.SIGKILL}.get(fault.kind, signal.SIGSTOP)
        shm_before = set(os.listdir("/dev/shm"))
        started = time.perf_counter()
        job = self.start(run_dir, logs, fault.policy, Fault(fault.host, fault.at, signum))
        t_fault = None
        try:
            _, line = job.wait_for_line(INJECTED, timeout=JOB_TIMEOUT_S)
            t_fault = self._strike(fault, line)
            out.code = job.finish(JOB_TIMEOUT_S)
        except AssertionError as err:  # the fault never struck
            out.problems.append(f"the fault did not strike: {str(err).splitlines()[0]}")
            out.code = job.finish(JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            out.problems.append(f"hang: the launcher did not end within {JOB_TIMEOUT_S:g} s")
            job.kill()
        out.wall_s, out.stderr = time.perf_counter() - started, job.stderr
        if t_fault is not None:
            restart = job.first_line_after(t_fault, "poprun_py: restarting the job")
            out.restart_s = restart and restart - t_fault
            # training again: the restarted attempt has loaded its checkpoint (or starts from scratch)
            starts = [job.first_line_after(restart, text) for text in ("INFO launch.train: Training ",
                                                                       "INFO launch.train: Resumed from")] \
                if restart else [None]
            out.training_s = starts[0] and max(t or 0.0 for t in starts) - t_fault
        out.problems += self._leftovers(fault, run_dir, t_fault, shm_before, _run_id(logs), out.code)
        self._judge(out, run_dir, logs)
        self._restore(fault, run_dir)
        return out

    def _strike(self, fault: HostFault, line: str) -> float:
        """Act on the victim's host (its instance is frozen at the fault's point), then let it go on."""
        if fault.kind in (KILL, STOP):
            match = re.search(r"t=([0-9.]+)", line)
            return float(match.group(1)) if match else time.time()
        c, k = self.cluster, fault.host
        if fault.kind == KILL_HOST:
            c.kill_host(k)
            return time.time()
        program = program_on(c, k)
        if fault.kind == CUT_LINK:
            c.cut_link(k)
        elif fault.kind == DEGRADE:
            if self.degrade[0].startswith("netem"):
                c.shape_link(k, NETEM)
            else:
                c.shape_link(k, TBF)
                c.drop_packets(k, 5)
        elif fault.kind == DISK_FULL:
            fill(self.disk)
        t = time.time()
        program.resume()
        return t

    def _leftovers(self, fault: HostFault, run_dir: Path, t_fault: float | None, shm_before: set[str],
                   run_id: str | None, code: int | None) -> list[str]:
        found = []
        if fault.kind == CUT_LINK:  # the cut-off host stops its own part of the job (poprun_py.fence)
            bound = (t_fault or time.time()) + fence_after(self.hang) + 15.0 - time.time()
            found += leftovers(self.cluster, hosts=[fault.host], wait=max(5.0, bound))
            self.cluster.cut_link(fault.host, up=True)
        # A killed host cannot clean up: its /tmp keeps its agent's folder (until it boots), and a
        # checkpoint it was writing stays half-written (.tmp, never read) until a run goes on in the folder
        # (launch.train.run_dir removes it then: a restart here, --resume auto after a stop).
        dead = f"poprun_{run_id}_i{fault.host}_" if fault.kind == KILL_HOST else None
        found += [x for x in leftovers(self.cluster, run_dir)
                  if not (dead and fault.host == 0 and code != 0 and x.startswith("half-written"))]
        found += [f"/dev/shm of this host: {name}" for name in set(os.listdir("/dev/shm")) - shm_before
                  if name.startswith("mpich")]
        mine = [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]
        _, alive = psutil.wait_procs(mine, timeout=5)
        found += [f"process pid {p.pid} still running" for p in alive]
        for p in alive:
            p.kill()
        tmp = Path(tempfile.gettempdir())  # the agents' working folders, named after the run
        folders = sorted(tmp.glob(f"poprun_{run_id}_*")) if run_id else []
        found += [f"an agent's working folder {f}" for f in folders if not (dead and f.name.startswith(dead))]
        for folder in folders:  # the next job starts clean whatever this one left
            shutil.rmtree(folder, ignore_errors=True)
        for k in range(self.hosts):
            for p in self.cluster.job_processes(k):
                p.kill()
            for name in self.cluster.shm_files(k):
                Path(f"/proc/{self.cluster.sshd_pids[k]}/root/dev/shm/{name}").unlink(missing_ok=True)
        return found

    def _restore(self, fault: HostFault, run_dir: Path) -> None:
        if fault.kind == KILL_HOST:
            self.cluster.revive_host(fault.host)
        elif fault.kind == DEGRADE:
            self.cluster.unshape_link(fault.host)
        elif fault.kind == DISK_FULL:
            (self.disk / "filler").unlink(missing_ok=True)
            shutil.rmtree(run_dir, ignore_errors=True)

    # -- the verdict -----------------------------------------------------------------------------
    def _judge(self, out: Outcome, run_dir: Path, logs: Path) -> None:
        fault = out.fault
        record = logs / "run.json"
        attempts = json.loads(record.read_text())["attempts"] if record.exists() else []
        out.attempts = [a["reason"] for a in attempts]
        out.problems += self._checkpoints(run_dir)
        victim = {self.cluster.names[fault.host], self.cluster.addresses[fault.host]}
        stop_due = fault.kind in HOST_LOSS and fault.policy != "elastic"
        if out.code == 0:
            out.problems += chaos.bitwise_problems(run_dir, self.baseline, self.steps)
            restart_due = fault.kind != DEGRADE
            if stop_due:
                out.problems.append(f"went on although the {fault.policy} policy rules it out")
            elif restart_due and len(attempts) < 2:
                out.problems.append(f"the fault caused no restart (attempts: {out.attempts})")
            if fault.kind in HOST_LOSS and fault.policy == "elastic":
                last = attempts[-1]["hosts"] if attempts else []
                if self.cluster.addresses[fault.host] in last:
                    out.problems.append(f"the last attempt still ran on the lost host ({last})")
            out.verdict = "other" if out.problems else "recovered"
            return
        said = _stop_message(out.stderr, fault, victim)
        if said is None:
            out.problems.append(f"exit code {out.code} without a message naming host {'/'.join(sorted(victim))} "
                                f"and the cause")
        elif not stop_due and fault.kind != DISK_FULL:
            out.problems.append(f"stopped although it could go on: {said[:200]}")
        out.verdict = "other" if out.problems else "stopped"

    def _checkpoints(self, run_dir: Path) -> list[str]:
        """Every checkpoint left must load and hold bitwise the uninterrupted run's arrays of its update;
        the losses logged so far must be the uninterrupted run's first ones."""
        problems = []
        for path in sorted((run_dir / "checkpoints").glob("ckpt-*.h5")):
            try:
                got, meta = chaos.ckpt.load_checkpoint(path)
                want, _ = chaos.ckpt.load_checkpoint(self.baseline / "checkpoints" / path.name)
            except (OSError, ValueError, KeyError) as err:
                problems.append(f"checkpoint {path.name} unreadable: {err}")
                continue
            if set(got) != set(want) or any(not np.array_equal(got[k], want[k]) for k in want):
                problems.append(f"checkpoint {path.name} differs from the uninterrupted run's")
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists():
            want_losses = chaos.final_state(self.baseline)[2]
            rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip().endswith("}")]
            losses = np.array([r["loss"] for r in rows if r.get("event") == "step"])
            if len(losses) > len(want_losses) or not np.array_equal(losses, want_losses[:len(losses)]):
                problems.append("the per-update losses logged differ from the uninterrupted run's")
        return problems


def _run_id(logs: Path) -> str | None:
    try:
        return json.loads((logs / "run.json").read_text())["run_id"]
    except (OSError, ValueError, KeyError):
        return None


def _stop_message(stderr: str, fault: HostFault, victim: set[str]) -> str | None:
    """The launcher's line that names the victim host and the cause of the stop, or None."""
    lines = [line for line in stderr.splitlines() if line.startswith("poprun_py:")]
    for line in reversed(lines):
        if not any(v in line for v in victim):
            continue
        if fault.kind == DISK_FULL and f"failed (host h{fault.host}," in line and "No space left on device" in stderr:
            return line
        if fault.kind in HOST_LOSS and (" lost (" in line or "ended with status" in line):
            return line
    return None


def _stat(values: list[float]) -> str:
    return f"{median(values):.1f} / {max(values):.1f} s" if values else "-"


def table(outcomes: list[Outcome], kinds: tuple[str, ...], degrade: tuple[str, str | None]) -> str:
    """The markdown table: per kind, the jobs, how they ended, and the recovery times."""
    rows = ["| fault | jobs | recovered bitwise | stopped correctly | other | fault -> restart decided "
            "(median / max) | fault -> training again (median / max) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for kind in KINDS:
        if kind not in kinds:
            rows.append(f"| {kind} | skipped: {degrade[1]} | | | | | |")
            continue
        mine = [o for o in outcomes if o.fault.kind == kind]
        label = f"{kind} ({degrade[0]})" if kind == DEGRADE else kind
        count = {v: sum(o.verdict == v for o in mine) for v in ("recovered", "stopped", "other")}
        back = [o for o in mine if o.verdict == "recovered"]
        rows.append(f"| {label} | {len(mine)} | {count['recovered']} | {count['stopped']} | {count['other']} | "
                    f"{_stat([o.restart_s for o in back if o.restart_s is not None])} | "
                    f"{_stat([o.training_s for o in back if o.training_s is not None])} |")
    return "\n".join(rows)


def main(args) -> int:
    unavailable = why_unavailable()
    if unavailable:
        print(f"host-level chaos needs real hosts: {unavailable}")
        return 2
    print(f"machine: {chaos.machine()}")
    work = Path(tempfile.mkdtemp(prefix="poprun_chaos_hosts_"))
    t0 = time.perf_counter()
    bench = HostChaos(work, args.hosts, args.steps, args.every, args.hang_timeout)
    try:
        kinds = KINDS if bench.degrade[0] else tuple(k for k in KINDS if k != DEGRADE)
        if bench.degrade[1]:
            print(f"link delay+loss: {bench.degrade[0] or 'skipped'}: {bench.degrade[1]}")
        base = bench.run_baseline()
        if base.verdict != "recovered":
            print(f"the uninterrupted run failed (exit {base.code}, {base.problems}):\n{base.stderr[-3000:]}")
            return 1
        print(f"uninterrupted run: {args.steps} updates on {args.hosts} hosts x 1 instance x 1 replica, "
              f"{base.wall_s:.1f} s\n")
        outcomes: list[Outcome] = []
        faults = plan(args.jobs, args.seed, args.steps, args.every, args.hosts, kinds)
        for n, fault in enumerate(faults, 1):
            if time.perf_counter() - t0 > args.time_limit:
                print(f"--time-limit {args.time_limit:g} s reached: {len(faults) - len(outcomes)} fault(s) not run")
                break
            out = bench.run(n, fault)
            outcomes.append(out)
            times = " ".join(f"{name} {value:.1f}s" for name, value in (("restart", out.restart_s),
                                                                       ("training", out.training_s)) if value)
            print(f"{n:>3} {fault.describe():<52} {','.join(out.attempts):<18} {out.wall_s:5.1f}s {times:<28} "
                  f"{out.verdict}" + (": " + "; ".join(out.problems) if out.problems else ""), flush=True)
            if out.verdict == "other":
                print("     " + out.stderr[-2500:].replace("\n", "\n     "), flush=True)
        print(f"\n{len(outcomes)} faults in {time.perf_counter() - t0:.0f} s on {args.hosts} hosts; load average "
              f"at end {os.getloadavg()[0]:.1f}; recovery times over the recovered jobs that restarted\n")
        print(table(outcomes, kinds, bench.degrade))
        return 0 if outcomes and all(o.verdict != "other" for o in outcomes) else 1
    finally:
        bench.close()
        if args.keep:
            print(f"run folders kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
