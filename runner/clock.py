"""Clock texts the runner reads and writes: a deadline's `HH:MM` time of day, and run ids.

Deadline `HH:MM` (local time) means the occurrence of that clock time nearest to now: within the
past 12 hours it is already past (a late start: no new job starts), otherwise the next one. So
`--deadline 07:00` from a 22:00 cron entry is tomorrow morning, and the same entry started late at
07:30 starts nothing new.

One definition of each, so that `cluster.yaml`'s `schedule.deadline`, `labprobe schedule install
--deadline` and `labprobe sweep --deadline` accept exactly the same texts (an entry the schedule
installs is one the sweep runs), and so that a sweep and a purge name their runs alike.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timedelta, timezone

from probes.result import InputError

HH_MM = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
"""24-hour time of day, two ASCII digits each: 00:00 to 23:59 ("7:05", "24:00", "12:60" are not)."""


def parse_hh_mm(text: str) -> tuple[int, int]:
    """`HH:MM` -> (hour, minute). ValueError without the option's name: each caller names its own."""
    match = HH_MM.fullmatch(text)
    if not match:
        raise ValueError(f"expected HH:MM (24-hour local time), got {text!r}")
    return int(match[1]), int(match[2])


def new_run_id(at: datetime | None = None) -> str:
    """`20261203T072207Z-c889`: the UTC start second, then 4 random hex digits so that two runs
    started in the same second differ. Sorting the text sorts by start second."""
    at = datetime.now(timezone.utc) if at is None else at.astimezone(timezone.utc)
    return f"{at:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


def parse_deadline(text: str, *, now: datetime | None = None) -> float:
    """`HH:MM` (local time) -> epoch seconds: the occurrence nearest to now (see module docstring)."""
    try:
        hour, minute = parse_hh_mm(text)  # what cluster.yaml and `schedule install` accept, no more
    except ValueError as exc:
        raise InputError(f"--deadline: {exc}") from None
    now = now or datetime.now().astimezone()
    today = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if today <= now - timedelta(hours=12):
        today += timedelta(days=1)
    elif today > now + timedelta(hours=12):
        today -= timedelta(days=1)
    return today.timestamp()
