"""`labprobe schedule install|remove|show`: the overnight sweep's crontab entry.

One tagged entry per (cluster file, plan), edited with python-crontab, never by hand: installing
again replaces the entry (idempotent), `remove` deletes it, `show` lists every labprobe entry.
cron runs commands with a bare environment from the user's home directory, so the entry carries
what the sweep needs: it changes to the cluster file's directory, sets PATH (and RAY_AUTH_MODE and
RAY_AUTH_TOKEN_PATH when set here, as `host-command` asks of every driver; never a token itself), runs
the `labprobe` of this very
environment by absolute path, and appends stdout and stderr to a log file.

`--crontab-file F` edits F (created if absent) instead of the user's crontab: for tests, and for
labs that deploy cron files (`crontab F` installs one). Defaults come from the cluster file's
`schedule` section; the flags override them.
"""

from __future__ import annotations

import os
import shlex
import sys
from datetime import datetime
from pathlib import Path

from crontab import CronItem, CronSlices, CronTab

from probes.result import InputError
from runner.clock import parse_deadline
from runner.lab.cluster import Cluster

TAG = "labprobe-sweep"
"""Every entry's comment starts with this; the rest names the plan and the cluster file."""


# -- the crontab ------------------------------------------------------------------------------
def read_crontab(path: Path | None) -> CronTab:
    if path is None:
        try:
            return CronTab(user=True)
        except OSError as exc:  # no `crontab` program here: point at the file option
            raise InputError(f"cannot read the user's crontab ({exc}); use --crontab-file F") from None
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a crontab file")
    if not path.exists():
        return CronTab(tab="")
    try:
        return CronTab(tab=path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable crontab ({exc})") from None


def write_crontab(tab: CronTab, path: Path | None) -> None:
    if path is None:
        try:
            tab.write_to_user(user=True)
        except OSError as exc:
            raise InputError(f"cannot write the user's crontab ({exc}); use --crontab-file F") from None
        return
    # Atomic, so cron never reads half a file.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    tmp.write_text(tab.render().lstrip("\n"), encoding="utf-8")
    os.replace(tmp, path)


def tag(plan: str, cluster_path: Path) -> str:
    return f"{TAG} plan={plan} cluster={cluster_path}"


def labprobe_entries(tab: CronTab) -> list[CronItem]:
    return [job for job in tab if job.comment.startswith(TAG + " ")]


def install(
    tab: CronTab,
    cluster: Cluster,
    *,
    plan: str | None = None,
    cron: str | None = None,
    deadline: str | None = None,
    log: Path | None = None,
) -> CronItem:
    """Add the plan's entry, replacing one already there for the same plan and cluster file."""
    defaults = cluster.spec.schedule
    plan = plan or (defaults.plan if defaults else None)
    cron = cron or (defaults.cron if defaults else None)
    deadline = deadline or (defaults.deadline if defaults else None)
    if plan is None or cron is None:
        missing = "--plan" if plan is None else "--cron"
        raise InputError(f"{missing}: not given, and {cluster.path.name} has no schedule section to default from")
    if plan not in cluster.spec.plans:
        raise InputError(
            f"--plan: unknown plan {plan!r} in {cluster.path.name} (plans: {', '.join(cluster.spec.plans) or 'none'})"
        )
    if not CronSlices.is_valid(cron):
        raise InputError(f"--cron: invalid cron expression {cron!r} (expected e.g. '0 1 * * *' or '@daily')")
    if deadline is not None:
        _check_deadline_after_start(cron, deadline)
    log_path = _log_path(cluster, plan, log)
    log_path.parent.mkdir(parents=True, exist_ok=True)  # `>>` cannot create a folder
    remove(tab, cluster_path=cluster.path, plan=plan)
    entry = tab.new(command=sweep_command(cluster.path, plan, deadline, log_path), comment=tag(plan, cluster.path))
    entry.setall(cron)
    return entry


def remove(tab: CronTab, *, cluster_path: Path | None, plan: str | None) -> int:
    """Delete labprobe entries: of one plan, or every plan of a cluster file, or (both None) all."""
    doomed = [
        job
        for job in labprobe_entries(tab)
        if (cluster_path is None or job.comment.endswith(f" cluster={cluster_path}"))
        and (plan is None or job.comment.startswith(f"{TAG} plan={plan} "))
    ]
    for job in doomed:
        tab.remove(job)
    return len(doomed)


# -- the command cron runs --------------------------------------------------------------------
def labprobe_command() -> list[str]:
    """This environment's `labprobe`, by absolute path (cron's PATH knows no venv)."""
    # The venv's bin folder, without resolving the python symlink out of the venv.
    script = Path(sys.executable).parent / "labprobe"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "runner.cli"]


def sweep_command(cluster_path: Path, plan: str, deadline: str | None, log: Path) -> str:
    """`{ stamp; cd DIR && ENV labprobe sweep ...; } >> LOG 2>&1`: everything lands in the log."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    # A driver joining a token-auth cluster needs the mode as well as the token's path (hostcmd.py).
    if os.environ.get("RAY_AUTH_MODE"):
        env["RAY_AUTH_MODE"] = os.environ["RAY_AUTH_MODE"]
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        env["RAY_AUTH_TOKEN_PATH"] = str(Path(os.environ["RAY_AUTH_TOKEN_PATH"]).absolute())
    sweep = labprobe_command() + ["sweep", "--cluster", str(cluster_path), "--plan", plan, "--report"]
    if deadline:
        sweep += ["--deadline", deadline]
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    q = shlex.quote
    return (
        f'{{ echo "== labprobe sweep {q(plan)} $(date -u -Iseconds)"; '
        f"cd {q(str(cluster_path.parent))} && {assignments} {shlex.join(sweep)}; }} "
        f">> {q(str(log))} 2>&1"
    )


def _log_path(cluster: Cluster, plan: str, log: Path | None) -> Path:
    if log is not None:
        return log.absolute()
    configured = cluster.spec.schedule.log if cluster.spec.schedule else None
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_absolute() else (cluster.base / path).resolve()
    return cluster.store_root() / "logs" / f"sweep-{plan}.log"


def _check_deadline_after_start(cron: str, deadline: str) -> None:
    """The sweep reads HH:MM as its nearest occurrence (runner.dispatch.lock): a deadline less than
    12 h after the start. A 01:00 start with a 23:00 deadline would skip every job, every night.
    A malformed HH:MM is an InputError naming --deadline, from the sweep's own parser."""

    parse_deadline(deadline)
    fields = cron.split()
    if len(fields) != 5 or not (fields[0].isdigit() and fields[1].isdigit()):
        return  # several start times: each is its own case; nothing simple to check
    start = datetime(2000, 1, 3, int(fields[1]), int(fields[0])).astimezone()
    if parse_deadline(deadline, now=start) <= start.timestamp():
        raise InputError(
            f"--deadline: {deadline} is not within 12 h after the {int(fields[1]):02d}:"
            f"{int(fields[0]):02d} start: the sweep would find it past and skip every job"
        )
