"""Train a model data-parallel over instances and replicas: ``poprun-train``.

    poprun_py --num-instances 2 --num-replicas 4 poprun-train
    poprun-train --config default --set run.epochs=1 --set optim.momentum=0.8
    poprun-train --config default --resume auto          # continue the newest run of run.run_dir
    poprun-train --config dense --print-config           # the resolved configuration, as YAML
    poprun-train --list-keys                             # every key, its type and default

Alone, one instance runs all ``data.replicas`` replicas. Under ``poprun_py`` each instance runs
its local replicas on its share of every global batch, and the launcher's replica count is the
run's (:func:`launch.train.distribute.distribute`). Each run has a folder of its own (``run.run_dir``; the
named configs number them, ``runs/<name>/{n}``: see ``launch.train.run_dir``). Instance 0 writes
``identity.json``, ``metrics.jsonl``, checkpoints, ``loss.png``, ``accuracy.png`` and
``summary.json`` there and shows the progress bar. ``--resume auto`` is the default when the
launcher restarts a failed job (``--max-restarts``). SIGUSR1 stops the run after the current update
with a checkpoint (exit 0); so does Ctrl-C (SIGINT, exit 130), and a second Ctrl-C stops it at once.
"""

from __future__ import annotations

import os

# numba's parallel kernels run on OpenMP; threads that spin while waiting slow training several
# times over when cores are shared (see poprun_py/cpu_binding.py). Set before numba loads OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# A stop request (SIGUSR1, Slurm's warning before a time limit or preemption) may come while the
# imports below take their seconds: from here on it is recorded, not fatal (launch/train/preemption.py).
from launch.train.preemption import StopRequest  # noqa: E402

STOP = StopRequest().install()

import argparse
import errno
import logging
import signal
import sys
import zlib
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

import poprun_py as popdist
from data.layout import DatasetError
from ipu.runtime.engine import WeightDivergenceError
from launch.train import checkpoint as ckpt
from launch.train import run_dir as rundir
from launch.train.build import Training, build_training, open_model_file
from launch.train.config import SECTIONS
from launch.train.config_file import load_config, override_keys
from launch.train.config_keys import describe_keys
from launch.train.distribute import SAID_ONCE, distribute, placement
from launch.train.first_compile import watch_compiles
from launch.train.loop import resume, run
from models.optim.loss_scaling import NonFiniteLossError
from poprun_py.errors import EXIT_INTERRUPTED

logger = logging.getLogger("launch.train")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="poprun-train", description=__doc__.splitlines()[0])
    p.add_argument("--config", default="default", help="a name in launch/train/configs.yml, or file.yml[:name]")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a config field (repeatable), e.g. --set optim.momentum=0.9")
    p.add_argument("--resume", default=None, metavar="auto|none|PATH",
                   help="auto: continue the run in run.run_dir from its newest checkpoint (default when "
                        "restarted by poprun_py); PATH: from that checkpoint")
    p.add_argument("--list-configs", action="store_true", help="print the configuration names and exit")
    p.add_argument("--print-config", action="store_true", help="print the resolved configuration as YAML and exit")
    p.add_argument("--list-keys", action="store_true",
                   help="print every configuration key with its type, its default and its value in --config; exit")
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_configs:
        import yaml

        from launch.train.config_file import CONFIGS_FILE
        print("\n".join(k for k in yaml.safe_load(CONFIGS_FILE.read_text()) if not k.startswith("_")))
        return 0
    dist = popdist.init()
    _setup_logging(args.verbose, dist.instance_index, dist.num_instances)
    t = None
    try:
        try:
            cfg, failure = distribute(load_config(args.config, args.overrides), dist, override_keys(args.overrides)), None
        except ValueError as err:
            cfg, failure = None, err
        comm = popdist.get_comm()
        if _config_failed(comm, failure):
            return 2
        if args.print_config or args.list_keys:
            return _print_config(cfg, args.list_keys, dist.instance_index == 0)
        compiles = watch_compiles(cfg.model.name, lead=dist.instance_index == 0)  # a machine's first run says so
        model_file = open_model_file(cfg)  # model.onnx, read once, against the dataset: before the run directory
        STOP.install((signal.SIGINT,))
        how = args.resume or ("auto" if dist.restart_count > 0 else "none")
        try:
            decision = rundir.prepare(cfg.to_dict(), comm, lead=dist.instance_index == 0, how=how,
                                      launcher_run_id=dist.run_id, restart=dist.restart_count > 0 and args.resume is None)
        except rundir.RunDirError as err:  # instance 0's verdict, on every instance: said once
            logger.error("%s: %s", type(err).__name__, err, extra=SAID_ONCE)
            comm.barrier()  # every instance leaves after instance 0 has said it
            return 2
        cfg = replace(cfg, run=replace(cfg.run, run_dir=decision.run_dir))
        t = build_training(cfg, comm, placement(cfg, dist), model_file)
        t.run_id = decision.run_id
        resumed = resume(t, decision)
        if t.lead:
            rundir.record_identity(decision, cfg.to_dict(), t.engine.params, launcher_run_id=dist.run_id,
                                   command=[os.path.basename(sys.argv[0]), *sys.argv[1:]])
        _log_start(t, decision)
        return run(t, resumed, STOP, comm, compiles)
    except (ValueError, NonFiniteLossError, WeightDivergenceError, DatasetError) as err:
        logger.error("%s: %s", type(err).__name__, err)  # the message says what to fix
        logger.debug("Traceback:", exc_info=True)
        return 2 if isinstance(err, (ValueError, DatasetError)) else 1
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = t.cfg.run.run_dir if t is not None else "the run directory"
        logger.error("OSError: %s: free space on the file system of %s, then continue with --resume auto (the "
                     "newest complete checkpoint is kept; no file is half-written)", err, where)
        return 1
    except KeyboardInterrupt:
        logger.warning("%s", _interrupted_line(t))
        return EXIT_INTERRUPTED


def _config_failed(comm, failure: ValueError | None) -> bool:
    """Whether any instance failed to read the configuration (every instance takes part). Every instance reads the
    same files and flags, so when all failed with the very same message instance 0 alone says it (``mpiexec -n 16
    poprun-train --set bad=1`` prints one line, not 16); otherwise each failed instance says its own, and the others
    stop without a word rather than wait in a collective that the failed ones never reach."""
    text = "" if failure is None else f"{type(failure).__name__}: {failure}"
    mine = np.array([zlib.crc32(text.encode()) if failure is not None else -1], dtype=np.int64)
    everyone = comm.allgather(mine)
    if failure is not None:
        logger.error("%s", text, extra=SAID_ONCE if bool(np.all(everyone == mine[0])) else None)
    if np.any(everyone != -1):
        comm.barrier()  # nobody leaves (an MPI_Abort in mpiexec mode) before every instance has said its line
        return True
    return False


def _interrupted_line(t: Training | None) -> str:
    """What a second Ctrl-C leaves behind, in one line."""
    if t is None:
        return "Interrupted (SIGINT) before training began: nothing was written."
    latest = ckpt.find_latest(t.cfg.run.run_dir, run_id=t.run_id)
    kept = (f"the newest checkpoint is {latest} (update {ckpt.step_of(latest)}); continue with --resume auto"
            if latest else "this run has no checkpoint")
    return f"Interrupted (SIGINT) at update {t.engine.step} of {t.total_steps} without a checkpoint: {kept}."


def _print_config(cfg, keys: bool, lead: bool) -> int:
    if lead:
        import yaml

        print(describe_keys(SECTIONS, cfg.to_dict()) if keys else
              yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None).rstrip())
    return 0


def _setup_logging(verbose: int, index: int, count: int) -> None:
    level = logging.DEBUG if verbose > 1 else logging.INFO if (verbose or index == 0) else logging.WARNING
    logging.basicConfig(level=level, format=f"[{index}/{count}] %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if index != 0:  # what every instance would say alike (extra=SAID_ONCE), instance 0 says once for the job
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda record: not getattr(record, "said_once", False))


def _log_start(t: Training, decision: rundir.Decision) -> None:
    cfg, spec = t.cfg, t.loader.spec
    logger.info("%s run %s in %s.", "New" if decision.checkpoint is None else "Continuing", t.run_id, cfg.run.run_dir)
    logger.info("Training %s on %s: %d instance(s) x %d local replica(s) = %d replicas; micro-batch %d x "
                "accumulation %d -> global batch %d; %d updates (%d per epoch, %d per host call); optimizer %s; "
                "run dir %s.",
                t.model_label, cfg.data.path, t.placement.num_instances, spec.local_replicas,
                t.placement.num_total_replicas,
                cfg.data.micro_batch, cfg.data.grad_accum, cfg.global_batch, t.total_steps,
                t.loader.steps_per_epoch, cfg.ipu.device_iterations, cfg.optim.name, cfg.run.run_dir)


if __name__ == "__main__":
    sys.exit(main())
