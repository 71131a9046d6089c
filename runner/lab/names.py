"""Names that become file names, checked by the byte length of the paths they become.

Checkpoint and host names become folder names under the store (`checkpoint=<name>` partitions),
a plan's name becomes its cron log, `<store>/logs/sweep-<plan>.log`. A name the filesystem refuses
("File name too long") used to pass `labprobe validate` and then fail every job after its work, when
the result was written. So each name is checked, in bytes (a name of 130 `é` is 260 bytes), against
the store filesystem's NAME_MAX, and the deepest path the store writes against its PATH_MAX, both
asked of the store root's nearest existing folder (`os.pathconf`), before anything runs.
"""

from __future__ import annotations

import os
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
            where = f"plans.{name[:80]}" if section == "plans" else f"{section}[{i}].name"
            if section == "plans" and ("/" in name or "\0" in name):
                errors.append(
                    f"{where}: a plan's name becomes a file name ({made.format('...')}); "
                    f"it cannot hold '/' or NUL: {shown(name)}"
                )
                continue
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
