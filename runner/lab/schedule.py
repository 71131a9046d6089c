"""`labprobe schedule install|remove|show|run`: the overnight sweep's crontab entry.

No text from a cluster file ever reaches a shell. The crontab line cron hands to `/bin/sh` is one
fixed command, `<labprobe> schedule run --entries <dir> <entry-id>`: the path of this environment's
`labprobe`, the entries folder and a hex id, all chosen by labprobe (and refused if they hold a
control character). Everything else (the cluster file, the plan, the deadline, the log, the working
folder, PATH and the Ray auth settings a driver needs, never a token) sits in the entry file
`<dir>/<entry-id>.json` that `install` wrote; `schedule run` reads it and starts the sweep as an
argument list, no shell, with its output appended to the log.

labprobe's lines live between two marker lines (BEGIN/END, below) and nowhere else. Each line is
re-rendered from its entry file by `show`: a line inside the block that labprobe would not have
written (edited by hand, pasted in, an entry file gone) is flagged, and `remove --all` deletes the
whole block. The id is a hash of (cluster file, plan): installing again replaces the entry.

`--crontab-file F` edits F (created if absent) instead of the user's crontab: for tests, and for
labs that deploy cron files (`crontab F` installs one). Defaults come from the cluster file's
`schedule` section; the flags override them. The entries folder is `--entries`, else
$LABPROBE_SCHEDULE_DIR, else `~/.local/state/labprobe/schedule`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from crontab import CronSlices

from probes.result import InputError, loads, shown
from runner.clock import parse_deadline
from runner.lab.cluster import Cluster
from runner.lab.names import is_safe_name, refuse_control

BEGIN = "# BEGIN labprobe schedule: lines written by `labprobe schedule`, edit them with it"
END = "# END labprobe schedule"
TAG = "labprobe-sweep"
"""What an older labprobe wrote as each entry's comment (a shell line, no block): `show` flags those."""
_ID = re.compile(r"[0-9a-f]{16}")
_CRON = re.compile(r"@[a-z]+|[0-9A-Za-z*/,-]+(\s+[0-9A-Za-z*/,-]+){4}")
"""The characters a cron expression needs: it is the one part of the line cron reads before the shell."""


@dataclasses.dataclass
class Entry:
    """One scheduled sweep, as its entry file holds it."""

    id: str
    cron: str
    cluster: str
    plan: str
    deadline: str | None
    log: str
    cwd: str
    env: dict[str, str]
    argv: list[str]


@dataclasses.dataclass
class Block:
    """A crontab split around labprobe's block: the lines before and after it, and its own lines."""

    before: list[str]
    lines: list[str]
    after: list[str]


# -- where entries live -----------------------------------------------------------------------
def entries_dir(given: Path | None) -> Path:
    if given is not None:
        folder = given
    elif os.environ.get("LABPROBE_SCHEDULE_DIR"):
        folder = Path(os.environ["LABPROBE_SCHEDULE_DIR"])
    else:
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        folder = Path(state) / "labprobe" / "schedule"
    folder = folder.expanduser().absolute()
    refused = refuse_control("--entries", str(folder))
    if refused:
        raise InputError(refused)
    return folder


def entry_id(cluster_path: Path, plan: str) -> str:
    return hashlib.sha256(f"{cluster_path}\0{plan}".encode("utf-8", "surrogateescape")).hexdigest()[:16]


def read_entry(folder: Path, eid: str) -> Entry:
    """The entry file of `eid`; InputError naming it when absent or not one labprobe wrote."""
    if not _ID.fullmatch(eid):
        raise InputError(f"entry id {shown(eid)}: expected 16 hex digits")
    path = folder / f"{eid}.json"
    try:
        raw = loads(path.read_text(encoding="utf-8"))
        entry = Entry(**raw)
    except FileNotFoundError:
        raise InputError(f"{path}: no such schedule entry (reinstall it with `labprobe schedule install`)") from None
    except (OSError, ValueError, TypeError) as exc:
        raise InputError(f"{path}: not a schedule entry labprobe wrote ({exc})") from None
    if entry.id != eid or not all(isinstance(a, str) for a in entry.argv) or not entry.argv:
        raise InputError(f"{path}: not a schedule entry labprobe wrote (its id or command does not match)")
    return entry


def write_entry(folder: Path, entry: Entry) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    _atomic_write(folder / f"{entry.id}.json", json.dumps(dataclasses.asdict(entry), indent=1) + "\n")


def line(entry: Entry, folder: Path) -> str:
    """The crontab line for `entry`: fixed words, labprobe's own paths quoted, the hex id. cron turns a
    `%` into a newline even inside quotes, so a path holding one is refused."""
    run = [*labprobe_command(), "schedule", "run", "--entries", str(folder), entry.id]
    bad = next((word for word in run if "%" in word), None)
    if bad is not None:
        raise InputError(f"{bad}: a '%' in a path breaks a crontab line (cron reads it as a newline); move it")
    return f"{entry.cron} {shlex.join(run)}"


# -- the crontab ------------------------------------------------------------------------------
def read_crontab(path: Path | None) -> str:
    if path is None:
        try:
            proc = subprocess.run(["crontab", "-l"], capture_output=True, check=False)
        except OSError as exc:  # no `crontab` program here: point at the file option
            raise InputError(f"cannot read the user's crontab ({exc}); use --crontab-file F") from None
        err = proc.stderr.decode("utf-8", "replace")
        if proc.returncode != 0 and "no crontab for" not in err:  # any other failure: never read as empty,
            raise InputError(f"cannot read the user's crontab: {' '.join(err.split()) or f'exit {proc.returncode}'}")
        return proc.stdout.decode("utf-8", "surrogateescape") if proc.returncode == 0 else ""  # else none yet
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a crontab file")
    if not path.exists():
        return ""
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")  # other lines kept byte for byte
    except OSError as exc:
        raise InputError(f"{path}: not a readable crontab ({exc})") from None


def write_crontab(text: str, path: Path | None) -> None:
    if path is None:
        try:
            data = text.encode("utf-8", "surrogateescape")  # the user's other lines back byte for byte
            proc = subprocess.run(["crontab", "-"], input=data, capture_output=True, check=False)
        except OSError as exc:
            raise InputError(f"cannot write the user's crontab ({exc}); use --crontab-file F") from None
        if proc.returncode != 0:
            raise InputError(
                f"cannot write the user's crontab: {' '.join(proc.stderr.decode('utf-8', 'replace').split())}"
            )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, text)  # cron never reads half a file


def split(text: str) -> Block:
    """The crontab around labprobe's block. Lines end at newlines only, as cron reads them (str.splitlines
    would also cut at form feeds and U+2028 inside the user's own lines). A BEGIN with no END is refused:
    the lines after it may be the user's, and install or remove would take them."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if BEGIN not in lines:
        return Block(before=lines, lines=[], after=[])
    start = lines.index(BEGIN)
    if END not in lines[start:]:
        raise InputError(f"the crontab has labprobe's {BEGIN!r} line but no {END!r} after it: mend it by hand")
    stop = lines.index(END, start)
    return Block(before=lines[:start], lines=lines[start + 1 : stop], after=lines[stop + 1 :])


def join(block: Block) -> str:
    own = [BEGIN, *block.lines, END] if block.lines else []
    body = [*block.before, *own, *block.after]
    return "\n".join(body) + "\n" if body else ""


def line_id(text: str) -> str | None:
    """The entry id a block line names (its last 16-hex word, so an edited line is still traced)."""
    found = re.findall(r"(?<![0-9a-f])[0-9a-f]{16}(?![0-9a-f])", text)
    return found[-1] if found else None


# -- install / remove / show ------------------------------------------------------------------
def install(
    text: str,
    cluster: Cluster,
    folder: Path,
    *,
    plan: str | None = None,
    cron: str | None = None,
    deadline: str | None = None,
    log: Path | None = None,
) -> tuple[str, Entry]:
    """The crontab with the plan's entry added (replacing one for the same plan and cluster file),
    and the entry, whose file is written here."""
    entry = new_entry(cluster, plan=plan, cron=cron, deadline=deadline, log=log)
    block = split(text)
    block.lines = [x for x in block.lines if line_id(x) != entry.id] + [line(entry, folder)]
    Path(entry.log).parent.mkdir(parents=True, exist_ok=True)
    write_entry(folder, entry)
    return join(block), entry


def new_entry(cluster: Cluster, *, plan: str | None, cron: str | None, deadline: str | None, log: Path | None) -> Entry:
    defaults = cluster.spec.schedule
    plan = plan or (defaults.plan if defaults else None)
    cron = cron or (defaults.cron if defaults else None)
    deadline = deadline if deadline is not None else (defaults.deadline if defaults else None)
    if plan is None or cron is None:
        missing = "--plan" if plan is None else "--cron"
        raise InputError(f"{missing}: not given, and {cluster.path.name} has no schedule section to default from")
    for flag, value in (("--plan", plan), ("--cron", cron), ("--deadline", deadline), ("--cluster", cluster.path)):
        refused = refuse_control(flag, str(value)) if value is not None else None
        if refused:
            raise InputError(refused)
    if not is_safe_name(plan) or plan not in cluster.spec.plans:
        known = ", ".join(p for p in cluster.spec.plans) or "none"
        raise InputError(f"--plan: unknown plan {shown(plan)} in {cluster.path.name} (plans: {known})")
    if not (_CRON.fullmatch(cron.strip()) and CronSlices.is_valid(cron)):
        raise InputError(f"--cron: invalid cron expression {shown(cron)} (expected e.g. '0 1 * * *' or '@daily')")
    if deadline is not None:
        _check_deadline_after_start(cron, deadline)
    log_path = _log_path(cluster, plan, log)
    refused = refuse_control("--log", str(log_path))
    if refused:
        raise InputError(refused)
    sweep = labprobe_command() + ["sweep", "--cluster", str(cluster.path), "--plan", plan, "--report"]
    sweep += ["--deadline", deadline] if deadline else []
    return Entry(
        id=entry_id(cluster.path, plan),
        cron=" ".join(cron.split()),
        cluster=str(cluster.path),
        plan=plan,
        deadline=deadline,
        log=str(log_path),
        cwd=str(cluster.path.parent),
        env=driver_env(),
        argv=sweep,
    )


def remove(text: str, folder: Path, *, cluster_path: Path | None, plan: str | None) -> tuple[str, int]:
    """The crontab without labprobe's entries of one plan, or of every plan of a cluster file, or
    (both None) the whole block, and older-format entries too; -> (text, number removed)."""
    block = split(text)
    kept, removed = [], 0
    for text_line in block.lines:
        if cluster_path is None and plan is None:
            removed += bool(text_line.strip())
            if line_id(text_line):
                (folder / f"{line_id(text_line)}.json").unlink(missing_ok=True)
            continue
        eid = line_id(text_line)
        entry = _entry_or_none(folder, eid)
        if entry is not None and (
            (cluster_path is None or entry.cluster == str(cluster_path)) and (plan is None or entry.plan == plan)
        ):
            removed += 1
            (folder / f"{entry.id}.json").unlink(missing_ok=True)
        else:
            kept.append(text_line)
    block.lines = kept
    if cluster_path is None and plan is None:
        older = [x for x in block.before + block.after if f"# {TAG} " in x]
        removed += len(older)
        block.before = [x for x in block.before if x not in older]
        block.after = [x for x in block.after if x not in older]
    return join(block), removed


def show(text: str, folder: Path) -> tuple[list[Entry], list[str]]:
    """labprobe's entries, and one line per problem: a line inside the block that labprobe did not
    write (it is not what the entry file renders to), an older entry outside it."""
    block = split(text)
    entries, problems = [], []
    for number, text_line in enumerate(block.lines, start=1):
        if not text_line.strip():
            continue
        entry = _entry_or_none(folder, line_id(text_line))
        if entry is None or line(entry, folder) != text_line:
            why = "no entry file for it" if entry is None else "differs from what its entry file renders"
            problems.append(f"NOT WRITTEN BY LABPROBE (block line {number}, {why}): {shown(text_line)}")
        else:
            entries.append(entry)
    if block.lines and END not in text.splitlines():
        problems.append("the block has no END line: every line after BEGIN counts as labprobe's")
    for text_line in block.before + block.after:
        if f"# {TAG} " in text_line:
            problems.append(
                f"older labprobe entry (a shell line): remove it with `schedule remove --all`: {shown(text_line)}"
            )
    return entries, problems


def _entry_or_none(folder: Path, eid: str | None) -> Entry | None:
    if eid is None:
        return None
    try:
        return read_entry(folder, eid)
    except InputError:
        return None


# -- what cron runs ---------------------------------------------------------------------------
def labprobe_command() -> list[str]:
    """This environment's `labprobe`, by absolute path (cron's PATH knows no venv)."""
    # The venv's bin folder, without resolving the python symlink out of the venv.
    script = Path(sys.executable).parent / "labprobe"
    if script.is_file() and os.access(script, os.X_OK):
        command = [str(script.absolute())]
    else:
        command = [str(Path(sys.executable).absolute()), "-m", "runner.cli"]
    refused = refuse_control("labprobe's path", command[0])
    if refused:
        raise InputError(refused)
    return command


def driver_env() -> dict[str, str]:
    """PATH (and PYTHONPATH, where a lab's harness module is found), and the Ray auth mode and token
    path a driver joining a token-auth cluster needs (host-command asks the same of every driver);
    never a token itself."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    if os.environ.get("RAY_AUTH_MODE"):
        env["RAY_AUTH_MODE"] = os.environ["RAY_AUTH_MODE"]
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        env["RAY_AUTH_TOKEN_PATH"] = str(Path(os.environ["RAY_AUTH_TOKEN_PATH"]).absolute())
    return env


def run(folder: Path, eid: str) -> int:
    """Run entry `eid`'s sweep from its folder, its output appended to its log; its exit code."""
    entry = read_entry(folder, eid)
    try:
        log = open(entry.log, "ab")  # noqa: SIM115 - handed to the child, closed below
    except OSError as exc:
        raise InputError(f"{entry.log}: cannot append the sweep's log: {exc.strerror or exc}") from None
    with log:
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        log.write(f"== labprobe sweep {entry.plan} {stamp}\n".encode())
        log.flush()
        env = {**os.environ, **entry.env}
        try:
            return subprocess.run(entry.argv, cwd=entry.cwd, env=env, stdout=log, stderr=log, check=False).returncode
        except OSError as exc:  # the folder or the labprobe gone since install
            log.write(f"cannot start the sweep: {exc}\n".encode())
            raise InputError(f"schedule entry {eid}: cannot start the sweep: {exc.strerror or exc}") from None


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    tmp.write_bytes(text.encode("utf-8", "surrogateescape"))  # a crontab's bytes not UTF-8 go back as read
    os.replace(tmp, path)


def _log_path(cluster: Cluster, plan: str, log: Path | None) -> Path:
    if log is not None:
        return log.absolute()
    configured = cluster.spec.schedule.log if cluster.spec.schedule else None
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_absolute() else (cluster.base / path).resolve()
    return Path(cluster.store_root()) / "logs" / f"sweep-{plan}.log"


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
