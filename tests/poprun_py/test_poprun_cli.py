import json
import os
import sys

import pytest

from poprun_py.cli import build_parser, config_from_args, main, normalise_switches, parse_args


def test_switches_bare_or_with_value_never_swallow_the_program():
    assert normalise_switches(["--print-topology", "python", "x.py"]) == ["--print-topology=yes", "python", "x.py"]
    assert normalise_switches(["--print-topology", "no", "prog"]) == ["--print-topology=no", "prog"]
    assert normalise_switches(["--", "--dry-run"]) == ["--", "--dry-run"]


def test_program_args_pass_through_untouched():
    args = parse_args(["--num-instances", "2", "--num-replicas", "2", "python", "t.py", "--num-instances", "9"], {})
    assert args.program == ["python", "t.py", "--num-instances", "9"]
    assert parse_args(["--", "prog", "-v"], {}).program == ["prog", "-v"]


def test_every_option_has_an_environment_default_and_the_command_line_wins():
    env = {"POPRUN_NUM_INSTANCES": "2", "POPRUN_NUM_REPLICAS": "8", "POPRUN_HANG_TIMEOUT": "30",
           "POPRUN_PRINT_TOPOLOGY": "yes", "POPRUN_LOG_DIR": "/tmp/x", "POPRUN_VERBOSE": "2"}
    args = parse_args(["--num-replicas", "4", "prog"], env)
    c = config_from_args(args)
    assert (c.num_instances, c.num_replicas, c.hang_timeout, c.print_topology, c.log_dir, c.verbose) == (
        2, 4, 30.0, True, "/tmp/x", 2)


def test_bad_environment_value_names_the_variable(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["prog"], {"POPRUN_GRACE_PERIOD": "soon"})
    assert exc.value.code == 2
    assert "POPRUN_GRACE_PERIOD='soon'" in capsys.readouterr().err


def test_launcher_mode_defaults_one_replica_per_instance():
    def replicas(*argv, env=None):
        return config_from_args(parse_args([*argv, "echo", "hi"], env or {})).num_replicas

    assert replicas("--num-instances", "2") == 2
    assert replicas("--num-instances", "4", "--ipus-per-replica", "2") == 4
    assert replicas() == 1
    assert replicas("--num-instances", "2", "--num-replicas", "8") == 8
    assert replicas(env={"POPRUN_NUM_INSTANCES": "4"}) == 4
    assert "default one per instance" in " ".join(build_parser().format_help().split())


def test_in_mpi_defaults_one_replica_per_instance_and_checks_size():
    c = config_from_args(parse_args(["t.py"], {}), mpi_size=4)
    assert (c.num_instances, c.num_replicas) == (4, 4)
    from poprun_py.errors import ConfigError

    with pytest.raises(ConfigError, match="--num-instances 2 but the MPI launcher started 4 ranks"):
        config_from_args(parse_args(["--num-instances", "2", "t.py"], {}), mpi_size=4)


@pytest.mark.parametrize("argv,message", [
    (["--num-instances", "2", "--num-replicas", "3", "true"], "--num-replicas 3 is not divisible by --num-instances 2"),
    (["no-such-program-xyz"], "program 'no-such-program-xyz' not found on PATH"),
    (["missing_script.py"], "program 'missing_script.py' not found"),
    (["python", "missing_script.py"], "script 'missing_script.py' not found"),
    (["--host", "a", "--hostfile", "f", "true"], "mutually exclusive"),
    (["--hostfile", "/nonexistent/hosts", "true"], "cannot read --hostfile /nonexistent/hosts"),
    (["--mpiexec", "/nonexistent/mpiexec", "true"], "--mpiexec '/nonexistent/mpiexec' was not found"),
])
def test_usage_errors_exit_2_with_the_fix(argv, message, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_dry_run_prints_command_and_environments(capsys):
    assert main(["--dry-run", "--num-instances", "2", "--num-replicas", "4", "python", "-c", "pass"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["command"][1:3] == ["-n", "2"]
    assert plan["command"][3:6] == [sys.executable, "-m", "poprun_py.agent"]
    assert plan["command"][-3:] == ["python", "-c", "pass"]
    assert [i["env"]["POPDIST_REPLICA_INDEX_OFFSET"] for i in plan["instances"]] == ["0", "2"]
    assert os.path.basename(plan["command"][0]) in ("mpiexec", "mpirun")


def test_help_states_computed_defaults_as_rules_not_none():
    from poprun_py.cli import build_parser

    text = build_parser().format_help()
    assert "(default: None)" not in text
    assert "default the smallest that fits" in text and "(default: 10.0)" in text  # a fixed default still shows


def test_a_mistyped_option_is_an_error_naming_the_closest_not_a_silent_abbreviation(capsys):
    with pytest.raises(SystemExit) as end:
        parse_args(["--num-instance", "2", "echo", "hi"], {})
    assert end.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "poprun_py: error: unrecognized option --num-instance; did you mean --num-instances? (options are not "
        "abbreviated; a program's own options go after it)")
    with pytest.raises(SystemExit):
        parse_args(["--num-repl=4", "echo"], {})
    assert "unrecognized option --num-repl; did you mean --num-replicas?" in capsys.readouterr().err
    # the program's own options, however they look, stay the program's
    assert parse_args(["--num-instances", "2", "echo", "--num-instance"], {}).program == ["echo", "--num-instance"]


@pytest.mark.parametrize("module,argv", [
    ("launch.train.cli", ["--conf", "dense", "--print-config"]),
    ("launch.study.cli", ["sgd-vs-adam", "--qui"]),
    ("launch.predict.cli", ["predict", "--micro", "2"]),
    ("data.__main__", ["convert", "synthetic", "out.h5", "--trai", "10"]),
])
def test_no_console_script_takes_an_abbreviated_option(module, argv, capsys):
    import importlib

    with pytest.raises(SystemExit) as end:
        importlib.import_module(module).build_parser().parse_args(argv)
    assert end.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
