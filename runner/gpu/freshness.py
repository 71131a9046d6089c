"""Is a run writing under a runs directory? Its newest file, found without walking the whole tree.

One input of the GPU idleness verdict (runner.gpu.idle): training runs write logs or metrics at
least every few minutes, so a file changed recently under a host's runs directory means a run is
live there, whatever NVML shows (a run between steps, or in a PID namespace NVML cannot see).
"""

from __future__ import annotations

import dataclasses
import heapq
import os
import time


@dataclasses.dataclass(frozen=True)
class FileAge:
    path: str
    age_s: float


def newest_file(root: str, *, fresh_s: float, now: float | None = None) -> FileAge | None:
    """The newest file under `root`, stopping at the first one younger than `fresh_s`.

    One scandir pass, one stat per entry, symlinks not followed (no loops, no leaving the tree),
    unreadable folders skipped. Newest folders first: a live run creates files, which bumps its
    folder's mtime, so a busy tree usually stops after a few folders. None when there is no file.
    """
    now = time.time() if now is None else now
    best: FileAge | None = None
    heap: list[tuple[float, str]] = [(0.0, root)]
    while heap:
        try:
            with os.scandir(heapq.heappop(heap)[1]) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    heapq.heappush(heap, (-entry.stat(follow_symlinks=False).st_mtime, entry.path))
                elif entry.is_file(follow_symlinks=False):
                    age = now - entry.stat(follow_symlinks=False).st_mtime
                    if best is None or age < best.age_s:
                        best = FileAge(entry.path, age)
                        if age < fresh_s:
                            return best
            except OSError:  # gone between listing and stat
                continue
    return best
