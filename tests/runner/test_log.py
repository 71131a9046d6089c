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
