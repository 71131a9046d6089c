"""One HH:MM rule for every deadline the runner reads, and one run-id format.

The deadline test feeds the same texts to the three places that read a deadline (cluster.yaml's
`schedule.deadline`, `schedule install --deadline`, `sweep --deadline`) and checks each accepts
exactly what a plain reading of "24-hour HH:MM" accepts: a place drifting looser or stricter fails.
"""

from __future__ import annotations

import re
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from probes.result import InputError
from runner.clock import new_run_id, parse_deadline, parse_hh_mm
from runner.lab import schedule
from runner.lab.cluster import ClusterError, load_cluster

GOOD = ["00:00", "07:00", "09:59", "12:30", "19:45", "20:00", "23:59"]
BAD = [
    "7:05",
    "7:5",
    "07:5",
    "24:00",
    "12:60",
    "25:99",
    "07:60",
    " 07:00",
    "07:00 ",
    "07:00\n",
    "0700",
    "07.00",
    "07:00:00",
    "+7:00",
    "-1:00",
    "7am",
    "",
    "ab:cd",
    "\uff10\uff17:\uff10\uff10",
]  # last: full-width 07:00

LAB = {
    "hosts": [{"name": "local", "address": "127.0.0.1"}],
    "plans": {"night": [{"probe": "mask", "hosts": ["local"]}]},
}


def is_24h_hh_mm(text: str) -> bool:
    """The rule from first principles: two ASCII digits, a colon, two ASCII digits; hour < 24, minute < 60."""
    hh, colon, mm = text.partition(":")
    digits = hh + mm
    return (
        colon == ":"
        and len(hh) == 2
        and len(mm) == 2
        and digits.isascii()
        and digits.isdigit()
        and int(hh) < 24
        and int(mm) < 60
    )


def test_the_case_lists_are_what_they_say():
    assert all(is_24h_hh_mm(t) for t in GOOD) and not any(is_24h_hh_mm(t) for t in BAD)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("clock")
    (root / "cluster.yaml").write_text(yaml.safe_dump(LAB))
    return root


def cluster_accepts(root: Path, text: str) -> bool:
    path = root / "with-deadline.yaml"
    path.write_text(yaml.safe_dump({**LAB, "schedule": {"plan": "night", "cron": "0 1 * * *", "deadline": text}}))
    try:
        load_cluster(path)
    except ClusterError as exc:
        assert exc.errors[0].startswith("with-deadline.yaml: schedule.deadline: "), exc.errors
        return False
    return True


def schedule_accepts(root: Path, text: str) -> bool:
    # '@daily' has no single start time, so only the HH:MM form is checked, not the 12 h window.
    folder = Path(tempfile.mkdtemp(dir=root))  # a fresh entries folder: a refusal must leave it empty
    try:
        crontab, entry = schedule.install(
            "",
            load_cluster(root / "cluster.yaml"),
            folder,
            plan="night",
            cron="@daily",
            deadline=text,
            log=root / "sweep.log",
        )
    except InputError as exc:
        # a control character is refused before the HH:MM reading, by the rule for every schedule input
        assert str(exc).startswith(("--deadline: expected HH:MM", "--deadline: holds control characters")), exc
        assert not any(folder.iterdir())
        return False
    shown, problems = schedule.show(crontab, folder)
    assert not problems and [e.id for e in shown] == [entry.id]
    return entry.deadline == text and schedule.sweep_argv(entry)[-2:] == ["--deadline", text]


def sweep_accepts(text: str) -> bool:
    try:
        parse_deadline(text)
    except InputError as exc:
        assert str(exc).startswith("--deadline: expected HH:MM"), exc
        return False
    return True


@pytest.mark.parametrize("text", GOOD + BAD)
def test_every_deadline_reader_accepts_exactly_24_hour_hh_mm(lab, text):
    expected = is_24h_hh_mm(text)
    assert {
        "cluster.yaml": cluster_accepts(lab, text),
        "schedule install": schedule_accepts(lab, text),
        "sweep": sweep_accepts(text),
    } == dict.fromkeys(["cluster.yaml", "schedule install", "sweep"], expected)


def test_parse_hh_mm_reads_hour_and_minute():
    assert parse_hh_mm("00:00") == (0, 0) and parse_hh_mm("07:05") == (7, 5) and parse_hh_mm("23:59") == (23, 59)
    with pytest.raises(ValueError, match=r"expected HH:MM \(24-hour local time\), got '7:05'"):
        parse_hh_mm("7:05")


def test_run_id_is_the_utc_start_second_and_four_hex_digits():
    # 08:22:07 at UTC+1 is 07:22:07 UTC.
    at = datetime(2026, 12, 3, 8, 22, 7, 999_999, tzinfo=timezone(timedelta(hours=1)))
    run_id = new_run_id(at)
    assert re.fullmatch(r"20261203T072207Z-[0-9a-f]{4}", run_id), run_id
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{4}", new_run_id())
    # The text sorts by start time; two ids of one second differ (almost always: 1 in 65,536 per pair).
    later = new_run_id(at + timedelta(seconds=1))
    assert sorted([later, run_id]) == [run_id, later]
    assert len({new_run_id(at) for _ in range(20)}) >= 19
