import dataclasses

import pytest

from poprun_py import env as envc
from poprun_py.config import validate_config
from poprun_py.env import DistInfo, RankInfo, detect_rank, instance_env, option_defaults, read_env
from poprun_py.errors import EnvironmentContractError
from poprun_py.topology import assign_instances


def test_instance_env_exact():
    info = assign_instances(validate_config(program=("x",), num_instances=2, num_replicas=4))[1]
    assert instance_env(info, run_id="r1", restart_count=2) == {
        "POPDIST_NUM_TOTAL_REPLICAS": "4",
        "POPDIST_NUM_LOCAL_REPLICAS": "2",
        "POPDIST_NUM_IPUS_PER_REPLICA": "1",
        "POPDIST_REPLICA_INDEX_OFFSET": "2",
        "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": "1",
        "POPDIST_LOCAL_INSTANCE_INDEX": "1",
        "POPDIST_INSTANCE_INDEX": "1",
        "POPDIST_NUM_INSTANCES": "2",
        "POPRUN_DEVICE_ID": "5",
        "POPRUN_ILD_INDEX": "0",
        "POPRUN_SYSTEM": "POD4",
        "POPRUN_HOST": "localhost",
        "POPRUN_RUN_ID": "r1",
        "POPRUN_RESTART_COUNT": "2",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.mark.parametrize("instances,replicas,ipus", [(1, 1, 1), (2, 4, 1), (4, 8, 2), (8, 64, 4)])
def test_round_trip(instances, replicas, ipus):
    config = validate_config(program=("x",), num_instances=instances, num_replicas=replicas, ipus_per_replica=ipus)
    for info in assign_instances(config):
        back = read_env(instance_env(info, run_id="r"))
        assert (back.instance_index, back.num_instances, back.num_total_replicas, back.num_local_replicas,
                back.replica_index_offset, back.ipus_per_replica, back.local_instance_index, back.device_id) == (
            info.index, info.num_instances, info.num_total_replicas, info.num_local_replicas,
            info.replica_offset, info.ipus_per_replica, info.local_index, info.device_id)
        assert back.placement == info  # the launcher's placement, field for field


def test_outside_a_launcher_is_one_instance_one_replica():
    assert read_env({}) == DistInfo(is_set=False)
    assert (read_env({}).num_instances, read_env({}).num_local_replicas) == (1, 1)


def test_graphcore_style_env_without_our_extra_names():
    # What PopRun sets: the instance index is derived as offset // local
    info = read_env({"POPDIST_NUM_TOTAL_REPLICAS": "8", "POPDIST_NUM_LOCAL_REPLICAS": "2",
                     "POPDIST_REPLICA_INDEX_OFFSET": "6"})
    assert (info.instance_index, info.num_instances) == (3, 4)


@pytest.mark.parametrize("environ,message", [
    ({"POPDIST_NUM_TOTAL_REPLICAS": "8", "POPDIST_NUM_LOCAL_REPLICAS": "3"}, "inconsistent PopDist variables"),
    ({"POPDIST_NUM_TOTAL_REPLICAS": "x"}, "POPDIST_NUM_TOTAL_REPLICAS='x' is not an integer"),
    ({"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_NUM_LOCAL_REPLICAS": "2", "POPDIST_REPLICA_INDEX_OFFSET": "2",
      "POPDIST_INSTANCE_INDEX": "0"}, "disagree with the replica layout"),
])
def test_inconsistent_env(environ, message):
    with pytest.raises(EnvironmentContractError, match=message):
        read_env(environ)


@pytest.mark.parametrize("environ,expected", [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
     RankInfo(3, 4, 1, "Open MPI")),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}, RankInfo(1, 2, 1, "MPICH/Hydra")),
    ({"MV2_COMM_WORLD_RANK": "0", "MV2_COMM_WORLD_SIZE": "2"}, RankInfo(0, 2, 0, "MVAPICH")),
    ({"PMIX_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8"}, RankInfo(5, 8, 0, "PMIx")),  # PMIx has no size variable
    ({"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "0"}, RankInfo(2, 4, 0, "Slurm")),
    # mpirun inside an srun step: MPI wins over Slurm
    ({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1", "PMI_RANK": "3", "PMI_SIZE": "4"},
     RankInfo(3, 4, 0, "MPICH/Hydra")),
    # a batch script: SLURM_PROCID without a job step is not a rank
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "16"}, None),
    ({}, None),
])
def test_detect_rank(environ, expected):
    assert detect_rank(environ) == expected


def test_detect_rank_out_of_range():
    with pytest.raises(EnvironmentContractError, match="PMI_RANK=4 is outside 0..3"):
        detect_rank({"PMI_RANK": "4", "PMI_SIZE": "4"})


def test_option_defaults():
    env = {"POPRUN_NUM_INSTANCES": "2", "POPRUN_LOG_DIR": "/x", "OTHER": "1"}
    assert option_defaults(env, ["num_instances", "log_dir", "hang_timeout"]) == {"num_instances": "2", "log_dir": "/x"}
    assert envc.OPTION_PREFIX == "POPRUN_"


def test_the_agents_spec_carries_the_launchers_placement_unchanged():
    from poprun_py.agent_spec import AgentSpec

    config = validate_config(program=("x",), num_instances=4, num_replicas=8, ipus_per_replica=2, hosts=("a", "b"))
    config = dataclasses.replace(config, log_dir="/l", grace_period=3.0)
    spec = AgentSpec.for_job(config, "run", tuple(assign_instances(config)), restart_count=1)
    back = AgentSpec.from_json(spec.to_json())
    assert back == spec
    assert (back.log_dir, back.grace_period, back.restart_count, back.num_hosts) == ("/l", 3.0, 1, 2)
    assert [(i.host, i.replica_offset, i.device_id) for i in back.instances] == [
        ("a", 0, 24), ("a", 2, 25), ("b", 4, 26), ("b", 6, 27)]


def test_the_oom_kill_counter_is_read_from_the_processs_memory_cgroup(tmp_path):
    from poprun_py.errors import exit_hint
    from poprun_py.oom import oom_kill_count, was_oom_kill

    v1 = tmp_path / "memory" / "job" / "memory.oom_control"
    v1.parent.mkdir(parents=True)
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job\n0::/\n")
    assert oom_kill_count(proc, tmp_path) == 3
    v2 = tmp_path / "slice" / "memory.events"
    v2.parent.mkdir()
    v2.write_text("low 0\nhigh 0\nmax 2\noom 2\noom_kill 1\n")
    proc.write_text("0::/slice\n")
    assert oom_kill_count(proc, tmp_path) == 1
    assert oom_kill_count(tmp_path / "missing", tmp_path) is None
    assert [was_oom_kill(1, 2), was_oom_kill(1, 1), was_oom_kill(None, 1)] == [True, False, None]
    assert exit_hint(None, 9, True).startswith("killed: out of memory")
    assert "not by the OOM killer" in exit_hint(137, None, False)
    assert "check `dmesg`" in exit_hint(None, 9, None)
