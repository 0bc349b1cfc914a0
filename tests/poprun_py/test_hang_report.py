"""The hang report names the instance that never reached the collective the others wait in, also
when that one reported last before the hang and has not been silent for the whole timeout yet."""

from poprun_py.report import InstanceState, hang_report


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
