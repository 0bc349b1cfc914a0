"""``poprun_py``: parse the command line once, then launch a job or run as one instance.

Launcher mode: ``poprun_py [options] [--] program [args...]`` starts ``--num-instances`` instances
through MPI. In-MPI mode: under ``mpirun``/``mpiexec``/``srun`` (a rank is detected), the process
becomes that rank's instance and runs the program itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from typing import Any

from poprun_py import __version__
from poprun_py import env as envc
from poprun_py.config import DEFAULT_OUTPUT_TAG, PLACEMENTS, LaunchConfig, validate_config
from poprun_py.errors import EXIT_USAGE, ConfigError, plural
from poprun_py.topology import assign_instances, expand_hosts, format_topology, parse_hostfile

logger = logging.getLogger("poprun_py")


def _yes_no(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "yes", "true", "on", "y"):
        return True
    if value in ("0", "no", "false", "off", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected yes or no, got {text!r}")


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except a computed one (None): its help states the rule."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False,  # a typo (--num-instance) is an error, not a guess
        prog="poprun_py",
        usage="poprun_py [options] [--] program [args...]",
        description="Launch a PopRun-style job of instances x replicas on simulated IPUs, through MPI. "
        "Every option can also be set as an environment variable POPRUN_<OPTION> "
        "(for example POPRUN_NUM_INSTANCES=2); the command line wins.",
        formatter_class=_HelpFormatter,
    )
    topo = p.add_argument_group("topology")
    topo.add_argument("--num-instances", type=int, metavar="N", default=None, help="instances (MPI ranks); default 1, or the MPI size in-MPI")
    topo.add_argument("--num-replicas", type=int, metavar="N", default=None, help="total replicas; default one per instance (--num-instances)")
    topo.add_argument("--ipus-per-replica", type=int, metavar="N", default=1, help="IPUs per replica")
    topo.add_argument("--num-ilds", type=int, metavar="N", default=None, help="IPU-Link domains; default the fewest that hold the job")
    topo.add_argument("--system", default=None, metavar="POD", help="simulated system POD4|POD16|POD64|POD128|POD256; default the smallest that fits")
    topo.add_argument("-H", "--host", default=None, metavar="HOSTS", help="hosts, e.g. host0,host1 or node[0-3]; instances are divided evenly; default localhost")
    topo.add_argument("--hostfile", default=None, metavar="FILE", help="file with one host per line (exclusive with --host)")
    mpi = p.add_argument_group("MPI")
    mpi.add_argument("--mpi-global-args", default="", metavar="ARGS", help="options for mpiexec itself, e.g. '-launcher ssh'")
    mpi.add_argument("--mpi-local-args", default="", metavar="ARGS", help="options for the instances' app context")
    mpi.add_argument("--mpiexec", default=None, metavar="PATH", help="MPI launcher to use; default the venv's (mpich wheel), then PATH")
    mpi.add_argument("--preflight", type=_yes_no, metavar="yes|no", default=None,
                     help="check every host (ssh, same paths, program, version) before starting; default yes with more than one host")
    mpi.add_argument("--mode", choices=("auto", "launch", "instance"), default="auto",
                     help="launch a job, or act as one instance under an MPI launcher; auto decides from the environment")
    place = p.add_argument_group("placement")
    place.add_argument("--process-placement", choices=PLACEMENTS, default="spreadnuma", help="CPU/NUMA binding of instances on a host")
    place.add_argument("--numa-aware", type=_yes_no, metavar="yes|no", default=None, help="PopRun's older switch: yes = spreadnuma, no = disabled; default: --process-placement")
    place.add_argument("--executable-cache-path", default=None, metavar="DIR", help="directory for compiled executables (exported to instances); default none")
    place.add_argument("--offline-mode", type=_yes_no, metavar="yes|no", default=True, help="accepted for PopRun compatibility: everything is offline here")
    out = p.add_argument_group("output and logs")
    out.add_argument("--only-output-from-instance", type=int, metavar="I", default=None, help="show only this instance's output (failure reports are always shown); default all")
    out.add_argument("--output-tag", default=DEFAULT_OUTPUT_TAG, metavar="TEMPLATE", help="prefix template: {instance} {host} {pid} {stream} {local} {replicas} {time}")
    out.add_argument("--log-dir", default=None, metavar="DIR", help="write attempt_K/instance_I/{stdout,stderr}.log and run.json here; default none")
    out.add_argument("--print-topology", type=_yes_no, metavar="yes|no", default=False, help="print the instance/replica table")
    out.add_argument("--dry-run", type=_yes_no, metavar="yes|no", default=False, help="print the MPI command and each instance's environment; run nothing")
    out.add_argument("-v", "--verbose", action="count", default=0, help="-v info, -vv debug")
    ctl = p.add_argument_group("failures")
    ctl.add_argument("--grace-period", type=_seconds, metavar="S", default=10.0, help="seconds between SIGTERM and SIGKILL when stopping")
    ctl.add_argument("--hang-timeout", type=_seconds, metavar="S", default=None, help="stop the job when an instance makes no progress for this long; default off")
    ctl.add_argument("--max-restarts", type=int, metavar="N", default=0, help="restart a failed job this many times (POPRUN_RESTART_COUNT tells the program)")
    ctl.add_argument("--min-instances", type=int, metavar="K", default=None,
                     help="elastic: restart on the hosts that answer, the same replicas over at least K instances; default off")
    p.add_argument("--version", action="version", version=f"poprun_py {__version__}")
    p.add_argument("program", nargs=argparse.REMAINDER, help="the command each instance runs")
    return p


# Switches that PopRun writes either bare (--print-topology) or with a value (--print-topology=yes).
SWITCHES = ("--numa-aware", "--offline-mode", "--print-topology", "--dry-run", "--preflight")
_YES_NO = {"1", "yes", "true", "on", "y", "0", "no", "false", "off", "n"}


def normalise_switches(argv: list[str]) -> list[str]:
    """Give bare switches an explicit ``yes`` so that they never swallow the program name."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return out + argv[i:]
        if token in SWITCHES:
            has_value = i + 1 < len(argv) and argv[i + 1].lower() in _YES_NO
            out.append(f"{token}={argv[i + 1] if has_value else 'yes'}")
            i += 2 if has_value else 1
            continue
        out.append(token)
        i += 1
    return out


def parse_args(argv: list[str], environ: dict[str, str]) -> argparse.Namespace:
    argv = normalise_switches(argv)
    parser = build_parser()
    dests = [a.dest for a in parser._actions if a.option_strings and a.dest not in ("help", "version")]
    defaults = envc.option_defaults(environ, dests)
    for action in parser._actions:
        if action.dest in defaults:
            raw = defaults[action.dest]
            try:
                action.default = int(raw) if action.dest == "verbose" else (action.type(raw) if action.type else raw)
            except (argparse.ArgumentTypeError, ValueError) as err:
                parser.error(f"environment variable POPRUN_{action.dest.upper()}={raw!r}: {err}")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(_unknown_options(parser, unknown))
    if args.program and args.program[0] == "--":
        args.program = args.program[1:]
    if not args.program:
        parser.error("no program given: usage `poprun_py [options] [--] program [args...]`")
    return args


def _unknown_options(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """The error for options the launcher does not know (never abbreviations: ``--num-instance``
    is a typo, not ``--num-instances``), with the closest option it has."""
    import difflib

    name = unknown[0].split("=", 1)[0]
    known = [o for a in parser._actions for o in a.option_strings]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else "; see poprun_py --help"
    return f"unrecognized option {name}{hint} (options are not abbreviated; a program's own options go after it)"


def _hosts(args: argparse.Namespace) -> tuple[str, ...]:
    if args.host and args.hostfile:
        raise ConfigError("--host and --hostfile are mutually exclusive: give one of them")
    if args.hostfile:
        try:
            with open(args.hostfile) as f:
                return tuple(parse_hostfile(f.read(), args.hostfile))
        except OSError as err:
            raise ConfigError(f"cannot read --hostfile {args.hostfile}: {err.strerror}") from None
    return tuple(expand_hosts(args.host)) if args.host else ("localhost",)


def config_from_args(args: argparse.Namespace, *, mpi_size: int | None = None) -> LaunchConfig:
    """The one place a ``LaunchConfig`` is built from parsed options."""
    instances = args.num_instances if args.num_instances is not None else (mpi_size or 1)
    if mpi_size is not None and instances != mpi_size:
        raise ConfigError(
            f"--num-instances {instances} but the MPI launcher started {plural(mpi_size, 'rank')}: in-MPI mode "
            f"one rank is one instance; drop --num-instances or start {plural(instances, 'rank')}")
    replicas = args.num_replicas if args.num_replicas is not None else instances  # one per instance
    placement = args.process_placement
    if args.numa_aware is not None:
        placement = "spreadnuma" if args.numa_aware else "disabled"
    extra: dict[str, Any] = dict(
        mpi_global_args=tuple(shlex.split(args.mpi_global_args)),
        mpi_local_args=tuple(shlex.split(args.mpi_local_args)),
        only_output_from_instance=args.only_output_from_instance, print_topology=args.print_topology,
        offline_mode=args.offline_mode, process_placement=placement,
        executable_cache_path=args.executable_cache_path, verbose=args.verbose, dry_run=args.dry_run,
        log_dir=os.path.abspath(args.log_dir) if args.log_dir else None, output_tag=args.output_tag,
        grace_period=args.grace_period, hang_timeout=args.hang_timeout, max_restarts=args.max_restarts,
        min_instances=args.min_instances, mpiexec=args.mpiexec,
    )
    hosts = ("localhost",) if mpi_size else _hosts(args)
    extra["preflight"] = args.preflight if args.preflight is not None else hosts != ("localhost",)
    return validate_config(
        program=tuple(args.program), num_instances=instances, num_replicas=replicas,
        ipus_per_replica=args.ipus_per_replica, num_ilds=args.num_ilds, hosts=hosts, system=args.system, **extra,
    )


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(
        level=level, format="%(asctime)s.%(msecs)03d %(process)d POPRUN_PY [%(levelname).1s] %(message)s",
        datefmt="%H:%M:%S", stream=sys.stderr,
    )


def script() -> None:
    """The ``poprun_py`` command and ``python -m poprun_py``."""
    sys.exit(main(leave_fast=True))


def main(argv: list[str] | None = None, *, leave_fast: bool = False) -> int:
    """``leave_fast``: after launching a job, leave with its exit code without the interpreter's
    teardown of every module (20-40 ms of a 2-core VM, paid by every job), output flushed first.
    Only the launcher does: in-MPI mode runs the user's program in this process, whose exit
    handlers must run."""
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = dict(os.environ)
    args = parse_args(argv, environ)
    _setup_logging(args.verbose)
    rank = envc.detect_rank(environ)
    in_mpi = args.mode == "instance" or (
        args.mode == "auto" and rank is not None and (rank.size > 1 or (args.num_instances or 1) == 1))
    try:
        _check_popdist_choice(environ)
        if in_mpi:
            from poprun_py.inmpi import run_as_instance

            config = config_from_args(args, mpi_size=rank.size if rank else 1)
            return run_as_instance(config, rank, environ)
        config = config_from_args(args)
        code = launch(config)
    except ConfigError as err:
        print(f"poprun_py: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if leave_fast:
        from poprun_py.processes import leave

        leave(code)
    return code


def _check_popdist_choice(environ: dict[str, str]) -> None:
    """``POPRUN_POPDIST`` (what ``import popdist`` gives the program) is read by the instances; a bad
    value stops the job here, before anything starts."""
    try:
        envc.popdist_choice(environ)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def launch(config: LaunchConfig) -> int:
    from poprun_py.launcher import Job
    from poprun_py.mpi_command import detect_flavor, find_mpiexec
    from poprun_py.output import Console

    _check_program(config.program)
    infos = assign_instances(config)
    if config.print_topology:
        print(format_topology(infos), flush=True)
    mpiexec = find_mpiexec(config.mpiexec)
    flavor = detect_flavor(mpiexec)
    run_id = os.environ.get(envc.RUN_ID) or time.strftime("%Y%m%d-%H%M%S-") + str(os.getpid())
    console = Console(template=config.output_tag, out=sys.stdout, err=sys.stderr,
                      only_instance=config.only_output_from_instance)
    job = Job(config, infos, console, mpiexec=mpiexec, flavor=flavor, run_id=run_id, python=sys.executable)
    if config.dry_run:
        print(json.dumps({"command": job.argv(0), "instances": [
            {"instance": i.index, "host": i.host, "env": envc.instance_env(i, run_id=run_id,
             executable_cache_path=config.executable_cache_path)} for i in infos]}, indent=2))
        return 0
    if config.preflight:
        from poprun_py.preflight import format_problems, run_preflight

        problems = run_preflight(config, mpiexec=mpiexec, flavor=flavor)
        if problems:
            raise ConfigError(format_problems(problems, len(config.hosts)))
    logger.info(
        "Launching %s on %s: %s x %s x %s per replica, hosts %s, %s via %s (%s)",
        " ".join(config.program), config.system, plural(config.num_instances, "instance"),
        plural(config.replicas_per_instance, "local replica"), plural(config.ipus_per_replica, "IPU"),
        ",".join(config.hosts), run_id, mpiexec, flavor)
    return job.run()


def _check_program(program: tuple[str, ...]) -> None:
    from poprun_py.preflight import program_problems

    problems = program_problems(program, os.getcwd())
    if problems:
        raise ConfigError(problems[0])


if __name__ == "__main__":
    sys.exit(main())
