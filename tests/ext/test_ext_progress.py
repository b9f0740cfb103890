"""The progress line: in place, rate-limited, cleared at the end; and Ctrl-C."""

from __future__ import annotations

import threading
import time
import types

from IPython.utils.capture import capture_output

from kernel_ext.progress import Progress, progress_text


class FakeHandle:
    def __init__(self, shown: list[str], text: str) -> None:
        self.shown = shown
        shown.append(text)

    def update(self, text: str) -> None:
        self.shown.append(text)


def stats(i: int, t_start: float = 0.0) -> types.SimpleNamespace:
    return types.SimpleNamespace(iteration=i, phase="tracing", t_start=t_start)


def test_progress_is_rate_limited_and_in_place():
    shown: list[str] = []
    now = [0.0]
    progress = Progress(0.5, show=lambda text: FakeHandle(shown, text), clock=lambda: now[0])
    for i in range(1000):  # 1000 iterations of 2 ms: 2 s
        now[0] = (i + 1) * 0.002
        progress(stats(i))
    assert progress.updates == len(shown) == 4  # at most one update per 0.5 s
    assert shown[0] == progress_text(249, "tracing", 500.0)
    progress.close()
    assert shown[-1] == ""


def test_short_loop_shows_no_progress():
    shown: list[str] = []
    progress = Progress(0.5, show=lambda text: FakeHandle(shown, text), clock=lambda: 0.1)
    for i in range(50):
        progress(stats(i))
    progress.close()
    assert shown == []


def test_cell_progress_uses_one_display_updated_in_place(ip):
    ip.run_line_magic("config", "TerraMagics.progress_interval = 0.05")
    cell = "%%terra\nimport time\nfor i in range(12):\n    time.sleep(0.02)\n"
    with capture_output() as captured:
        assert ip.run_cell(cell).success
    outputs = captured.outputs
    assert len(outputs) >= 2
    ids = {o.transient["display_id"] for o in outputs}
    assert len(ids) == 1  # one display, updated in place
    assert [o.update for o in outputs] == [False] + [True] * (len(outputs) - 1)
    texts = [o.data["text/plain"] for o in outputs]
    # no op for the graph: its iterations ran eagerly, and the phase says so
    assert texts[0].startswith("terra: iteration ") and " | eager | " in texts[0]
    assert texts[-1] == ""  # cleared: the summary line replaces it
    assert len(outputs) <= 2 + 12 * 0.02 / 0.05 + 1
    assert captured.stdout.startswith("terra[coexec]: 12 iterations")


def test_the_summary_line_starts_on_a_fresh_line(ip, capsys):
    """After a loop that printed dots without a newline the summary was glued onto them."""
    assert ip.run_cell('%%terra\nfor i in range(3):\n    print(".", end="")\n').success
    assert capsys.readouterr().out.startswith("...\nterra[coexec]: 3 iterations")
    assert ip.run_cell('%%terra\nfor i in range(3):\n    print(i)\n').success
    assert capsys.readouterr().out.startswith("0\n1\n2\nterra[coexec]: 3 iterations")


def test_quiet_cell_shows_no_progress(ip):
    ip.run_line_magic("config", "TerraMagics.progress_interval = 0.0")
    with capture_output() as captured:
        assert ip.run_cell("%%terra --quiet\nfor i in range(5):\n    pass\n").success
    assert captured.outputs == [] and captured.stdout == ""


def test_interrupt_stops_the_loop_cleanly(ip):
    """A real Ctrl-C (SIGINT to the main thread) while the loop runs."""
    setup = "import time, tensorflow as tf\nv = tf.Variable(0.0)\ncount = 0\nt0 = time.time()"
    assert ip.run_cell(setup).success
    threads = threading.active_count()
    # a lost Ctrl-C ends the loop after 60 s (the test then fails instead of hanging)
    cell = ("%%terra --quiet\nwhile time.time() - t0 < 60:\n    v.assign_add(1.0)\n"
            "    count += 1\n")
    timer = threading.Timer(0.5, _interrupt_main)
    timer.start()
    started = time.perf_counter()
    result = ip.run_cell(cell)
    timer.join()
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert time.perf_counter() - started < 5
    assert threading.active_count() == threads
    assert "__terra__" not in ip.user_ns
    count, value = ip.user_ns["count"], float(ip.user_ns["v"].numpy())
    assert count > 0 and value in (count, count + 1)  # as eager left them mid-iteration
    terra = ip.magics_manager.registry["TerraMagics"].runner.last
    assert len(terra.stats) in (count, count + 1)  # the interrupted iteration, if begun
    assert all(s.ended == "completed" for s in terra.stats[:count - 1])
    assert ip.run_cell("%%terra --quiet\nfor i in range(2):\n    v.assign_add(1.0)\n").success
    assert float(ip.user_ns["v"].numpy()) == value + 2


def test_an_interrupts_traceback_shows_the_users_lines_only(ip):
    """A Ctrl-C lands wherever the loop is, often inside terra-nb: its traceback hides those
    frames, as other errors' do (before, it showed the engine's hooks and runners)."""
    import traceback

    assert ip.run_cell("import time, tensorflow as tf\nv = tf.Variable(0.0)\nt0 = time.time()")
    cell = "%%terra --quiet\nwhile time.time() - t0 < 60:\n    v.assign_add(1.0)\n"
    timer = threading.Timer(0.5, _interrupt_main)
    timer.start()
    result = ip.run_cell(cell)
    timer.join()
    error = result.error_in_exec
    assert isinstance(error, KeyboardInterrupt)
    frames = traceback.extract_tb(error.__traceback__)
    files = [frame.filename for frame in frames]
    ours = [f for f in files if "/terra_nb/" in f or "/kernel_ext/" in f]
    shown = [f for f in ours if not f.endswith(("kernel_ext/cell.py", "kernel_ext/magics.py"))]
    assert shown == [], files  # the two left are marked __tracebackhide__ (IPython hides them)
    assert any("v.assign_add" in (f.line or "") or "while time" in (f.line or "")
               for f in frames), frames  # the user's line


def _interrupt_main() -> None:
    import _thread

    _thread.interrupt_main()
