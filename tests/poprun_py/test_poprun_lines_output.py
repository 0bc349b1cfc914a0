import io

from poprun_py.lines import FRAME, LINE, MAX_RECORD, LineSplitter
from poprun_py.output import Console, TagFields


def test_lines_across_chunks_and_crlf():
    s = LineSplitter()
    assert s.feed(b"hel") == []
    assert s.feed(b"lo\nwor") == [(LINE, "hello")]
    assert s.feed(b"ld\r") == []  # could be half of \r\n
    assert s.feed(b"\nnext") == [(LINE, "world")]
    assert s.close() == [(LINE, "next")]


def test_progress_bar_redraws_are_frames():
    s = LineSplitter()
    assert s.feed(b"\r 10%|#  |\r 50%|## |\r100%|###|\n") == [
        (FRAME, " 10%|#  |"), (FRAME, " 50%|## |"), (LINE, "100%|###|")]


def test_stale_partial_shown_once_then_completed():
    s = LineSplitter()
    s.feed(b"\rloading 3/10")
    assert s.stale() == [(FRAME, "loading 3/10")]
    assert s.stale() == []
    assert s.feed(b" done\n") == [(LINE, "loading 3/10 done")]


def test_utf8_split_inside_a_character_and_invalid_bytes():
    s = LineSplitter()
    data = "é\n".encode()
    assert s.feed(data[:1]) == []
    assert s.feed(data[1:]) == [(LINE, "é")]
    assert s.feed(b"\xff\n") == [(LINE, "\ufffd")]


def test_huge_line_is_cut():
    s = LineSplitter()
    pieces = s.feed(b"x" * (MAX_RECORD * 2 + 5))
    assert [len(t) for _, t in pieces] == [MAX_RECORD, MAX_RECORD]
    assert s.close() == [(LINE, "xxxxx")]


def make_console(**kw):
    out, err = io.StringIO(), io.StringIO()
    now = [100.0]
    c = Console(template=kw.pop("template", "[{instance}] "), out=out, err=err, clock=lambda: now[0], **kw)
    return c, out, err, now


def test_console_tags_and_routes_streams():
    c, out, err, _ = make_console(template="[{instance}@{host}:{replicas}] ")
    c.fields[1] = TagFields(1, "h1", 42, 0, "2-3")
    c.line(1, "out", "hello")
    c.line(1, "err", "oops")
    assert out.getvalue() == "[1@h1:2-3] hello\n"
    assert err.getvalue() == "[1@h1:2-3] oops\n"


def test_only_instance_filters_lines_but_not_messages():
    c, out, err, _ = make_console(only_instance=0)
    c.line(1, "out", "hidden")
    c.line(0, "out", "shown")
    c.message("poprun_py: instance 1 failed")
    assert out.getvalue() == "[0] shown\n"
    assert err.getvalue() == "poprun_py: instance 1 failed\n"


def test_frames_off_a_terminal_are_throttled_lines():
    c, out, _, now = make_console(frame_interval=5.0)
    c.frame(0, "out", "10%")
    now[0] += 1
    c.frame(0, "out", "20%")  # within the interval: dropped
    c.frame(1, "out", "5%")  # other instance: own interval
    now[0] += 5
    c.frame(0, "out", "90%")
    assert out.getvalue() == "[0] 10%\n[1] 5%\n[0] 90%\n"


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_frames_on_a_terminal_redraw_in_place_under_scrolling_lines():
    out = err = Tty()
    c = Console(template="[{instance}] ", out=out, err=err)
    c.frame(0, "err", "10%")
    c.line(1, "err", "a line")
    c.close()
    assert err.getvalue() == "\r\x1b[K[0] 10%" + "\r\x1b[K" + "[1] a line\n" + "[0] 10%" + "\n"


def test_a_warning_or_error_every_instance_gives_alike_is_shown_once_per_job():
    c, _, err, _ = make_console()
    warning = "WARNING launch.train.distribute: The launcher runs 8 replicas; the configuration's data.replicas=4 gives way"
    for i in range(16):
        c.line(i, "err", f"[{i}/16] {warning}")
    c.line(3, "err", "[3/16] ERROR launch.train: RunDirError: run.run_dir same is in use")
    c.line(5, "err", "[5/16] ERROR launch.train: RunDirError: run.run_dir same is in use")
    c.line(0, "err", f"[0/16] {warning}")  # the same instance again (a later epoch): shown again
    c.line(1, "err", "[1/16] INFO launch.train: ordinary lines are never dropped")
    c.line(2, "err", "[2/16] INFO launch.train: ordinary lines are never dropped")
    assert err.getvalue().splitlines() == [
        f"[0] [0/16] {warning}", "[3] [3/16] ERROR launch.train: RunDirError: run.run_dir same is in use",
        f"[0] [0/16] {warning}", "[1] [1/16] INFO launch.train: ordinary lines are never dropped",
        "[2] [2/16] INFO launch.train: ordinary lines are never dropped"]


def test_the_failure_report_points_to_an_error_on_the_screen_instead_of_repeating_it():
    from poprun_py.report import InstanceState, failure_report

    state = InstanceState(1, host="vm", pid=7, exit_code=2, duration=1.5, ended=True,
                          tail=["[1/2] ERROR launch.train: RunDirError: run.run_dir same is in use"])
    hidden = failure_report(state, 2, None, shown=False)  # --only-output-from-instance 0: not on the screen
    assert "last stderr lines of instance 1:\n    [1/2] ERROR launch.train: RunDirError" in hidden
    shown = failure_report(state, 2, None, shown=True)
    assert "RunDirError" not in shown and "below" not in shown
    assert shown.splitlines()[-1] == ("  its error: in the output above (its own lines are tagged [1]; an error that "
                                      "every instance gives alike is shown once)")
