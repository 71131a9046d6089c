"""Is a run still being written? A purge never touches a run that may be training.

Two signs, either refuses the run: a file or folder under the run changed (its mtime) less
than the host's `idle.runs_quiet_min` ago (the same threshold that tells an idle GPU; default 10
minutes), or a process on this host holds a file under the run open for writing (every
`/proc/<pid>/fd` this user may read; its `fdinfo` says the access mode). The purge asks once in
the plan and again right before each rename.
"""

from __future__ import annotations

import os
import time

from runner.chores.fstree import is_inside, readable, walk_tree


def writers(folders: list[str], proc: str = "/proc") -> dict[str, list[str]]:
    """Folder -> `pid N (command) writes PATH` for each file under it open for writing now."""
    real = {os.path.realpath(f): f for f in folders}
    found: dict[str, list[str]] = {}
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        for target in _written_files(os.path.join(proc, pid)):
            for folder, given in real.items():
                if is_inside(target, folder):
                    found.setdefault(given, []).append(f"pid {pid} ({_command(proc, pid)}) writes {readable(target)}")
    return found


def _written_files(pid_dir: str) -> list[str]:
    """Paths this process holds open for writing (O_WRONLY or O_RDWR), as /proc names them."""
    out = []
    try:
        fds = os.listdir(os.path.join(pid_dir, "fd"))
    except OSError:  # gone, or another user's
        return out
    for fd in fds:
        try:
            target = os.readlink(os.path.join(pid_dir, "fd", fd))
            with open(os.path.join(pid_dir, "fdinfo", fd), encoding="ascii") as handle:
                flags = next((int(line.split()[1], 8) for line in handle if line.startswith("flags:")), 0)
        except (OSError, ValueError):
            continue
        if target.startswith("/") and flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
            out.append(target.removesuffix(" (deleted)"))
    return out


def _command(proc: str, pid: str) -> str:
    try:
        with open(os.path.join(proc, pid, "comm"), encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def quiet_reason(newest_ns: int, quiet_s: float, now_ns: int | None = None) -> str:
    """Why the run counts as training by its newest change ("" when it has been quiet long enough)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    age_s = (now_ns - newest_ns) / 1e9
    if newest_ns and age_s < quiet_s:
        return (
            f"training: something under the run changed {max(age_s, 0):.0f} s ago, within runs_quiet_min "
            f"({quiet_s / 60:g} min): refused while a run may be writing"
        )
    return ""


def training_reasons(run_path: str, quiet_s: float) -> list[str]:
    """Both signs for one run, read now (the check right before a rename)."""
    tree = walk_tree(run_path, "run", index_only=True)
    reasons = [quiet_reason(max(tree.newest(), _own_change(run_path)), quiet_s)]
    open_now = writers([run_path]).get(run_path, [])
    if open_now:
        reasons.append(f"training: open for writing: {'; '.join(open_now[:3])}")
    return [r for r in reasons if r]


def _own_change(path: str) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_mtime_ns
