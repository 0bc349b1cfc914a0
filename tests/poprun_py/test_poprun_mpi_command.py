import pytest

from poprun_py.config import validate_config
from poprun_py.mpi_command import HYDRA, OPENMPI, agent_command, build_mpiexec_argv, hydra_compatible, parse_flavor


def test_hydra_single_host_golden():
    c = validate_config(program=("python", "train.py", "--lr", "0.1"), num_instances=2, num_replicas=4)
    argv = build_mpiexec_argv(c, mpiexec="/v/bin/mpiexec", flavor=HYDRA,
                              rank_command=agent_command("{}", c.program, "/v/bin/python"), environ={})
    assert argv == ["/v/bin/mpiexec", "-n", "2", "/v/bin/python", "-m", "poprun_py.agent", "{}", "--",
                    "python", "train.py", "--lr", "0.1"]


def test_hydra_hosts_and_user_args_golden():
    c = validate_config(program=("prog",), num_instances=4, num_replicas=8, hosts=("h0", "h1"),
                        mpi_global_args=("-launcher", "ssh", "--tag-output"), mpi_local_args=("-env", "A", "1"))
    argv = build_mpiexec_argv(c, mpiexec="mpiexec", flavor=HYDRA, rank_command=["agent"], environ={})
    assert argv == ["mpiexec", "-hosts", "h0:2,h1:2", "-launcher", "ssh", "-n", "4", "-env", "A", "1", "agent"]


def test_openmpi_golden_forwards_environment():
    c = validate_config(program=("prog",), num_instances=4, num_replicas=4, hosts=("a", "b"),
                        mpi_global_args=("--mca", "btl", "tcp,self"))
    argv = build_mpiexec_argv(c, mpiexec="mpirun", flavor=OPENMPI, rank_command=["agent"],
                              environ={"PATH": "/bin", "PYTHONPATH": "/p"}, is_root=True)
    assert argv == ["mpirun", "--bind-to", "none", "--oversubscribe", "--allow-run-as-root", "-H", "a:2,b:2",
                    "-x", "PATH", "-x", "PYTHONPATH", "--mca", "btl", "tcp,self", "-np", "4", "agent"]


@pytest.mark.parametrize("text,flavor", [
    ("HYDRA build details:\n    Version: 4.2.0", HYDRA),
    ("mpirun (Open MPI) 4.1.5\n\nReport bugs to", OPENMPI),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.6", HYDRA),
    ("something else", HYDRA),
])
def test_parse_flavor(text, flavor):
    assert parse_flavor(text) == flavor


def test_hydra_compatible_drops_openmpi_only_flags():
    assert hydra_compatible(("--tag-output", "-verbose", "--allow-run-as-root")) == ["-verbose"]
