"""The hang report names the instance that never reached the collective the others wait in, also
when that one reported last before the hang and has not been silent for the whole timeout yet; an
mpiexec that could not reach a host is reported in one line naming the host and ssh's reason."""

from poprun_py.report import InstanceState, hang_report, mpi_end_report


def state(index: int, what: str, last: float) -> InstanceState:
    return InstanceState(index, host="h", pid=100 + index, last_activity=last, last_what=what)


def test_the_culprit_is_named_whichever_instance_reported_last():
    for waiter_last, culprit_last in ((93.0, 94.5), (94.5, 93.0)):  # either one silent for 7 s, the other 5.5 s
        states = [state(0, "in allreduce #4 (2 elements)", waiter_last), state(1, "stuck in a loop", culprit_last)]
        text = hang_report(states, now=100.0, timeout=6.0).splitlines()
        assert "  likely culprit: instance 1 never reached the collective that instance 0 waits in" in text
        stuck = 0 if waiter_last < culprit_last else 1
        assert text[0] == f"poprun_py: no progress for 6 s from instance {stuck}; stopping the job"
        assert text[2 + stuck].startswith(f"  STUCK instance {stuck} (host h, pid 10{stuck})")


def test_no_culprit_when_every_instance_waits_in_a_collective():
    states = [state(0, "in allreduce #4 (2 elements)", 90.0), state(1, "in barrier #2", 90.0)]
    assert "likely culprit" not in hang_report(states, now=100.0, timeout=6.0)


HYDRA_SSH_REFUSED = [
    "ssh: connect to host 10.1.0.5 port 22: Connection refused",
    "[mpiexec@vm] ui_cmd_cb (/mpich-5.0.2/src/pm/hydra/mpiexec/pmiserv_pmci.c:51): Launch proxy failed.",
    "[mpiexec@vm] main (/mpich-5.0.2/src/pm/hydra/mpiexec/mpiexec.c:270): process manager error waiting for completion",
]


def test_mpiexec_that_could_not_reach_a_host_is_reported_in_one_line_naming_the_host_and_why():
    """Chaos (bench/chaos_hosts.py): a restart without --min-instances after a host was lost. The
    report is one line, the ssh error of that host first, not MPI's five lines of its own."""
    said = mpi_end_report("mpiexec", 255, HYDRA_SSH_REFUSED, ("10.1.0.2", "10.1.0.5"))
    assert said.splitlines() == [said]
    assert said.startswith("poprun_py: mpiexec ended with status 255 before every instance reported its end: "
                           "host 10.1.0.5: unreachable: ssh: connect to host 10.1.0.5 port 22: Connection refused; ")
    assert "10.1.0.2" not in said and "Launch proxy failed" not in said


def test_mpiexec_that_ended_for_another_reason_is_reported_with_its_last_lines():
    lines = ["[mpiexec@vm] control_cb (pmiserv_cb.c:280): assert (!closed) failed", "another line"]
    said = mpi_end_report("mpiexec", 255, lines, ("a", "b")).splitlines()
    assert said == ["poprun_py: mpiexec ended with status 255 before every instance reported its end; "
                    "its last messages:", *("    " + line for line in lines)]
    assert mpi_end_report("mpiexec", 3, [], ("a",)) == (
        "poprun_py: mpiexec ended with status 3 before every instance reported its end")
