"""The stop request: a signal is only recorded; the instances agree on it through an all-reduce."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from launch.train import checkpoint as ckpt
from launch.train.preemption import StopRequest
from poprun_py.comm import LoopbackComm


class PeerComm(LoopbackComm):
    """Stands for a second instance whose vote joins every sum all-reduce."""

    def __init__(self, peer_signal: int) -> None:
        super().__init__()
        self.peer = StopRequest()
        self.peer.signum = peer_signal

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        assert op == "sum"
        array += self.peer.flags()
        return array


def test_sigusr1_is_recorded_not_fatal_and_every_instance_agrees():
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        stop = StopRequest().install()
        assert stop.agreed(LoopbackComm()) == 0 and stop.agreed(PeerComm(0)) == 0
        assert StopRequest().agreed(PeerComm(signal.SIGUSR1)) == signal.SIGUSR1  # only a peer was signalled
        os.kill(os.getpid(), signal.SIGUSR1)  # the default action would end this process
        assert stop.agreed(LoopbackComm()) == signal.SIGUSR1
        assert stop.agreed(PeerComm(0)) == signal.SIGUSR1
        assert StopRequest.decide(stop.flags() + PeerComm(signal.SIGUSR1).peer.flags()) == signal.SIGUSR1
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_the_votes_ride_in_the_gradient_all_reduce_and_every_instance_reads_the_same_sum():
    """Two engines as two instances: one all-reduce per update carries gradients, metrics and flags."""
    from ipu.runtime.engine import Engine
    from ipu.runtime.replica import DeviceOps, SingleIpuReplica
    from models.optim import OptimConfig, make_optimizer
    from models.optim.loss_scaling import LossScaleConfig, LossScaler
    from models.optim.schedules import ScheduleConfig, make_schedule
    from models.registry import build_model

    class Recorded(LoopbackComm):
        size = 2

        def __init__(self):
            super().__init__()
            self.sums = []

        def allreduce(self, array, op="sum"):
            self.sums.append(array.size)
            array *= 2  # the other instance holds the same values
            return array

    comm = Recorded()
    model = build_model("dense-mnist", 10, hidden=[8], resolution=4, in_channels=1)
    engine = Engine(model, make_optimizer(OptimConfig(name="sgd"), model.params()),
                    make_schedule(ScheduleConfig(kind="constant", base_lr=0.1), 10, 10), comm,
                    [SingleIpuReplica(model, 0, DeviceOps((127.0,), (64.0,)))], grad_accum=1, total_replicas=2,
                    scaler=LossScaler(LossScaleConfig(initial_scale=1.0)), num_flags=len(StopRequest().flags()))
    stop = StopRequest()
    stop.signum = signal.SIGUSR1
    engine.flags[:] = stop.flags()
    images = np.zeros((1, 1, 2, 4, 4, 1), np.uint8)
    m = engine.train_step(images, np.zeros((1, 1, 2), np.int64))
    # one collective: the gradients, a loss sum per global replica (2), correct and count, the flags
    assert comm.sums == [engine.flat.size + 2 + 2 + len(engine.flags)]
    assert m.samples == 4 and StopRequest.decide(engine.agreed_flags) == signal.SIGUSR1


def test_a_stop_request_during_start_up_stops_at_update_0(tmp_path):
    """The request is sent at once: the child starts with SIGUSR1 blocked (inherited), so it stays
    pending until launch.train's first lines install the handler, which unblocks it."""
    root = Path(__file__).resolve().parents[3]
    cmd = [sys.executable, "-m", "launch.train", "--config", "dense", "--set", "run.max_steps=20",
           "--set", "run.progress_bar=false", "--set", "run.plots=false", "--set", f"run.run_dir={tmp_path}"]
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1",
                                     "NUMBA_NUM_THREADS": "1"})
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    assert "SIGUSR1: stopped after update 0 of 20" in err
    assert ckpt.step_of(ckpt.find_latest(tmp_path)) == 0
