"""Names that become file names, checked by the byte length of the paths they become.

Checkpoint and host names become folder names under the store (`checkpoint=<name>` partitions),
a plan's name becomes its cron log, `<store>/logs/sweep-<plan>.log`. A name the filesystem refuses
("File name too long") used to pass `labprobe validate` and then fail every job after its work, when
the result was written. So each name is checked, in bytes (a name of 130 `é` is 260 bytes), against
the store filesystem's NAME_MAX, and the deepest path the store writes against its PATH_MAX, both
asked of the store root's nearest existing folder (`os.pathconf`), before anything runs.

Names are also drawn from one safe set of characters (`SAFE_NAME`): letters, digits, `.`, `_`, `-`,
starting with a letter or digit. A plan named `$(touch x)` or holding a newline used to pass
`validate` and reach the crontab line `schedule install` wrote; no name can carry shell syntax or
break a line now, and no text labprobe did not choose ever reaches a shell (runner.lab.schedule).
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

from probes.result import shown

WRAPPER_BYTES = 32
"""Room a writer adds around a name: a temporary file `.<name>.tmp-<pid>` before its rename, and headroom."""
FILE_BYTES = 64
"""The longest file name the store puts under a job's folders (`<job_id>-<run_id>.parquet`: 46 bytes)."""
TABLE_BYTES = 64
"""The longest table folder name (`<probe>.<table>`, fixed by the code: about 20 bytes)."""
DEFAULT_LIMITS = (255, 4096)
"""NAME_MAX and PATH_MAX where the filesystem cannot be asked (Linux's values)."""
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""Plans, checkpoints, corpora (and hosts, whose pattern in cluster.py is this one, shorter)."""
SAFE_CHARACTERS = "letters, digits, '.', '_' and '-', starting with a letter or digit"


def is_safe_name(name: str) -> bool:
    return isinstance(name, str) and SAFE_NAME.fullmatch(name) is not None


def control_characters(text: str) -> list[str]:
    """The control characters (newline, tab, escape, ...) in `text`, as `\\n`-style escapes."""
    return [repr(c)[1:-1] for c in dict.fromkeys(text) if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


def refuse_control(where: str, text: str) -> str | None:
    """`where: ...` when `text` holds a control character (a newline would start a new crontab line)."""
    bad = control_characters(text)
    return f"{where}: holds control characters ({' '.join(bad)}), refused: {shown(text)}" if bad else None


def plan_name_errors(plans: list[str]) -> list[str]:
    """One line per plan name outside the safe set (key path `plans.<name>`)."""
    return [
        f"plans.{shown(name)}: a plan's name may hold only {SAFE_CHARACTERS} "
        f"(it names the sweep's log file and its schedule entry)"
        for name in plans
        if not is_safe_name(name)
    ]


def fs_limits(path: Path) -> tuple[int, int]:
    """(NAME_MAX, PATH_MAX) of the filesystem holding `path`, asked of its nearest existing folder."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError):
        return DEFAULT_LIMITS


def path_name_errors(
    store_root: Path, *, local: bool, checkpoints: list[str], hosts: list[str], plans: list[str]
) -> list[str]:
    """One line per name (key path first) that would make a file name or path the filesystem refuses.

    `local`: the store root is a folder here (not an object-store URL), so its filesystem is asked
    and the whole path is checked too."""
    name_max, path_max = fs_limits(store_root) if local else DEFAULT_LIMITS
    errors: list[str] = []
    longest: dict[str, int] = {}
    for section, names, made in (
        ("checkpoints", checkpoints, "checkpoint={}"),
        ("hosts", hosts, "host={}"),
        ("plans", plans, "sweep-{}.log"),
    ):
        for i, name in enumerate(names):
            if section == "plans" and not is_safe_name(name):
                continue  # plan_name_errors says so
            where = f"plans.{name}" if section == "plans" else f"{section}[{i}].name"
            size, own = len(os.fsencode(made.format(name))), len(os.fsencode(name))
            longest[section] = max(longest.get(section, 0), size)
            if size + WRAPPER_BYTES > name_max:
                errors.append(
                    f"{where}: {shown(name)} is {own} bytes and becomes the file name "
                    f"{made.format('<name>')}; on the store's filesystem (names of at most "
                    f"{name_max} bytes) it may be {name_max - WRAPPER_BYTES - (size - own)} bytes at most"
                )
    if local and not errors:
        deepest = (
            len(os.fsencode(str(store_root)))
            + 1
            + TABLE_BYTES
            + 1
            + longest.get("hosts", 0)
            + 1
            + longest.get("checkpoints", 0)
            + 1
            + FILE_BYTES
            + WRAPPER_BYTES
        )
        if deepest > path_max:
            errors.append(
                f"store.root: paths under {shown(str(store_root))} would reach {deepest} bytes with "
                f"the longest host and checkpoint names, over this filesystem's PATH_MAX {path_max}"
            )
    return errors
