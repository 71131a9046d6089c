"""runner/log.py: the runner's lines (plain on a terminal, timestamped in a log) and Ray's output kept
off the terminal: a raylet killed under a connected driver makes Ray print its log tail (the "raylet
dump") to the driver's stdout; inside `foreign_output_to` it lands in the log file instead."""

from __future__ import annotations

import io
import os
import re
import signal
import sys
import time

from runner.log import foreign_output_to, logger, setup


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_runner_lines_are_plain_on_a_terminal_and_stamped_elsewhere(monkeypatch):
    setup()
    for stream, pattern in ((Tty(), r"hello 1\n"), (io.StringIO(), r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ hello 1\n")):
        monkeypatch.setattr(sys, "stderr", stream)
        logger.info("hello %d", 1)
        assert re.fullmatch(pattern, stream.getvalue()), stream.getvalue()


def test_a_dead_raylets_dump_goes_to_the_log_file_not_the_terminal(ray_cluster, tmp_path, capfd):
    node = ray_cluster.add_node(num_cpus=1, labels={"labprobe.host": "noisy"})
    ray_cluster.wait_for_nodes()
    log = tmp_path / "ray.log"
    try:
        with foreign_output_to(log) as (out, _):
            node.all_processes["raylet"][0].process.send_signal(signal.SIGKILL)
            deadline = time.monotonic() + 60
            while "Raylet is terminated" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
            print("ours", file=out)
            os.write(2, b"ray's C++ core writes here\n")
    finally:
        ray_cluster.remove_node(node, allow_graceful=False)
    text = log.read_text()
    assert "Raylet is terminated. Termination is unexpected" in text and "ray's C++ core writes here" in text
    captured = capfd.readouterr()
    assert "ours" in captured.out and "Raylet" not in captured.out + captured.err
    assert "C++ core" not in captured.err


def test_ray_output_is_never_appended_through_a_link_planted_where_the_log_goes(tmp_path, caplog):
    """<store>/logs/ray-purge.log (a fixed name) or $TMPDIR/labprobe-ray-purge.log a symlink or a hard
    link to another file: Ray's output was appended to that file, outside the store."""
    import os

    victim = tmp_path / "victim"
    for plant in (os.symlink, os.link):
        victim.write_text("precious\n")
        log = tmp_path / "logs" / f"ray-{plant.__name__}.log"
        log.parent.mkdir(exist_ok=True)
        plant(victim, log)
        with foreign_output_to(log):
            print("ray says hello")
        assert victim.read_text() == "precious\n"
        assert "ray says hello" not in victim.read_text() and "not appended to" in caplog.text, caplog.text
