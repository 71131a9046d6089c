"""Is a run still being written? A purge never touches a run that may be training.

Two signs, either refuses the run: a file or folder under the run changed (its mtime) less
than the host's `idle.runs_quiet_min` ago (the same threshold that tells an idle GPU; default 10
minutes), or a process on this host uses a file under the run: open for writing or reading, mapped,
or as its working directory (every `/proc/<pid>` this user may read: `fd`, `fdinfo` for the access
mode, `maps`, `cwd`). The purge asks once in the plan and again right before each rename.
"""

from __future__ import annotations

import os
import time

from runner.chores.fstree import is_inside, readable, walk_tree


def users(folders: list[str], proc: str = "/proc") -> dict[str, list[str]]:
    """Folder -> `pid N (command) writes|reads|maps|works in PATH` for each process of this host using a file
    under it now: open for writing or reading (an eval or a resume loading shards one by one), mapped
    (safetensors loads by mmap, then may close the fd), or its working directory. This process excepted."""
    real = {os.path.realpath(f): f for f in folders}
    found: dict[str, list[str]] = {}
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return found
    for pid in pids:
        for how, target in _used_files(os.path.join(proc, pid)):
            for folder, given in real.items():
                if is_inside(target, folder):
                    found.setdefault(given, []).append(f"pid {pid} ({_command(proc, pid)}) {how} {readable(target)}")
    return found


def _used_files(pid_dir: str) -> list[tuple[str, str]]:
    """(how, path) of what this process uses, as /proc names them: its open files (writes or reads), its
    mapped files and its working directory."""
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
        if target.startswith("/"):
            how = "writes" if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR) else "reads"
            out.append((how, target.removesuffix(" (deleted)")))
    out += [("maps", path) for path in _mapped(pid_dir)]
    try:
        out.append(("works in", os.readlink(os.path.join(pid_dir, "cwd"))))
    except OSError:
        pass
    return out


def _mapped(pid_dir: str) -> set[str]:
    try:
        with open(os.path.join(pid_dir, "maps"), encoding="utf-8", errors="surrogateescape") as handle:
            fields = [line.rstrip("\n").split(maxsplit=5) for line in handle]
    except OSError:
        return set()
    return {f[5].removesuffix(" (deleted)") for f in fields if len(f) == 6 and f[5].startswith("/")}


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
    open_now = users([run_path]).get(run_path, [])
    if open_now:
        reasons.append(in_use_reason(open_now))
    return [r for r in reasons if r]


def in_use_reason(uses: list[str], shown: int = 3) -> str:
    """The refusal for a run a process uses: `training: open for writing` when one writes, else `in use`."""
    what = "training: open for writing" if any(") writes " in u for u in uses) else "in use by a process"
    return f"{what}: {'; '.join(uses[:shown])}"


def _own_change(path: str) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_mtime_ns
