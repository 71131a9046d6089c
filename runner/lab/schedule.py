"""`labprobe schedule install|remove|show|run`: the overnight sweep's crontab entry.

No text from a file ever reaches a shell or becomes a command. The crontab line cron hands to `/bin/sh`
is one fixed command, `<labprobe> schedule run --entries <dir> <entry-id>`: the path of this
environment's `labprobe`, the entries folder and a hex id, all chosen by labprobe (and refused if they
hold a control character). The entry file `<dir>/<entry-id>.json` that `install` wrote holds data
only: the cluster file, the plan, the store, the deadline, the log, and Ray's auth mode and token path
(never a token). `schedule run` checks each value, builds the sweep's argument list itself (this
environment's labprobe, `sweep --cluster F --plan P --report`, and --deadline/--store when set) and
starts it without a shell, in the cluster file's folder, its output appended to the log. A key it does
not know is refused: no argv, no environment, no working folder comes from the file.

The entry file and its folder must belong to the user running labprobe and be writable by nobody else
(as sshd's StrictModes asks of ~/.ssh): a folder or file owned by another user, writable by group or
others, or a symbolic link is refused, by `run` (nothing starts) and by `show` (exit 1, naming the file
and why). The file is opened without following links and checked on the opened descriptor, so it
cannot be swapped between the check and the read. `install` makes the folder 0700 and the file 0600.

labprobe's lines live between two marker lines (BEGIN/END, below) and nowhere else. Each line is
re-rendered from its entry file by `show`: a line inside any block that labprobe would not have
written (edited by hand, pasted in, an entry file gone or refused) is flagged, a second block is
flagged, and `remove --all` deletes every block. The id is a hash of (cluster file, plan):
installing again replaces the entry.

`--crontab-file F` edits F (created if absent) instead of the user's crontab: for tests, and for
labs that deploy cron files (`crontab F` installs one). Defaults come from the cluster file's
`schedule` section; the flags override them. The entries folder is `--entries`, else
$LABPROBE_SCHEDULE_DIR, else `~/.local/state/labprobe/schedule`; `show` and `remove` read each line's
own `--entries` folder, so they need not be told the one `install` was given.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import re
import shlex
import stat
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from crontab import CronSlices

from probes.result import InputError, loads, shown
from runner.clock import parse_deadline
from runner.lab.cluster import Cluster
from runner.lab.names import control_characters, is_safe_name, refuse_control
from runner.store.root import LOGS, is_url

BEGIN = "# BEGIN labprobe schedule: lines written by `labprobe schedule`, edit them with it"
END = "# END labprobe schedule"
TAG = "labprobe-sweep"
"""What an older labprobe wrote as each entry's comment (a shell line, no block): `show` flags those."""
_ID = re.compile(r"[0-9a-f]{16}")
_CRON = re.compile(r"@[a-z]+|[0-9A-Za-z*/,-]+(\s+[0-9A-Za-z*/,-]+){4}")
"""The characters a cron expression needs: it is the one part of the line cron reads before the shell."""


@dataclasses.dataclass
class Entry:
    """One scheduled sweep, as its entry file holds it: parameters, never a command."""

    id: str
    cron: str
    cluster: str
    """The cluster file, absolute: the sweep runs in its folder."""
    plan: str
    store: str | None
    """The store root the sweep writes to; None: the cluster file's."""
    deadline: str | None
    log: str
    """The file the sweep's output is appended to, absolute."""
    ray_auth_mode: str | None
    """RAY_AUTH_MODE for the driver (token or disabled), as it was where install ran; None: unset."""
    ray_auth_token_path: str | None
    """RAY_AUTH_TOKEN_PATH for the driver, absolute; never the token itself."""


KEYS = tuple(f.name for f in dataclasses.fields(Entry))
AUTH_MODES = ("token", "disabled")
MAX_ENTRY_BYTES = 64 * 1024


@dataclasses.dataclass
class Crontab:
    """A crontab as a list of parts: a str is one of the user's lines, a list one labprobe block's lines
    (between its BEGIN and END)."""

    parts: list[str | list[str]]

    def blocks(self) -> list[list[str]]:
        return [p for p in self.parts if isinstance(p, list)]


# -- where entries live, and how they are read --------------------------------------------------
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


def _owned_by_me(what: Path, st: os.stat_result) -> None:
    """StrictModes: owned by this user, writable by nobody else; InputError saying which it is not."""
    if st.st_uid != os.geteuid():
        raise InputError(f"{what}: owned by uid {st.st_uid}, not by you (uid {os.geteuid()}): refused")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(st.st_mode)
        raise InputError(f"{what}: writable by group or others (mode {mode:04o}): refused (chmod go-w it)")


def _open_folder(folder: Path) -> int:
    """A descriptor of the entries folder, checked on the descriptor itself: a real folder (no link),
    owned by this user, writable by nobody else."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{folder}: no such schedule entries folder") from None
    except OSError as exc:
        why = "a symbolic link or not a folder" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror
        raise InputError(f"{folder}: entries folder refused: {why}") from None
    try:
        _owned_by_me(folder, os.fstat(fd))
    except InputError:
        os.close(fd)
        raise
    return fd


def _read_entry_text(folder: Path, eid: str) -> str:
    path = folder / f"{eid}.json"
    dir_fd = _open_folder(folder)
    try:
        try:  # no link followed, and every check below made on what was opened: no swap in between
            fd = os.open(f"{eid}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            raise InputError(
                f"{path}: no such schedule entry (reinstall it with `labprobe schedule install`)"
            ) from None
        except OSError as exc:
            why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
            raise InputError(f"{path}: schedule entry refused: {why}") from None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: schedule entry refused: not a regular file")
        _owned_by_me(path, st)
        data = file.read(MAX_ENTRY_BYTES + 1)
    if len(data) > MAX_ENTRY_BYTES:
        raise InputError(f"{path}: not a schedule entry labprobe wrote (over {MAX_ENTRY_BYTES} bytes)")
    return data.decode("utf-8", "strict")


def read_entry(folder: Path, eid: str) -> Entry:
    """The entry file of `eid`, checked; InputError naming it and why when absent, unsafe or not one
    labprobe wrote."""
    if not isinstance(eid, str) or not _ID.fullmatch(eid):
        raise InputError(f"entry id {shown(eid)}: expected 16 hex digits")
    path = folder / f"{eid}.json"
    try:
        raw = loads(_read_entry_text(folder, eid))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a schedule entry labprobe wrote ({exc})") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: not a schedule entry labprobe wrote (expected a JSON object)")
    unknown = [k for k in raw if k not in KEYS]
    if unknown:  # an `argv` or `env` of an older labprobe, or planted: never read
        raise InputError(
            f"{path}: unknown key {shown(unknown[0])} refused (an entry holds only {', '.join(KEYS)}; "
            "one an older labprobe wrote: install it again)"
        )
    missing = [k for k in KEYS if k not in raw]
    if missing:
        raise InputError(f"{path}: key {missing[0]!r} missing: reinstall it with `labprobe schedule install`")
    entry = Entry(**raw)
    why = _bad_value(entry, eid)
    if why:
        raise InputError(f"{path}: refused: {why}")
    return entry


def _bad_value(entry: Entry, eid: str) -> str | None:
    """Why `entry` is not one labprobe wrote for `eid`, or None."""
    texts = {"cron": entry.cron, "cluster": entry.cluster, "plan": entry.plan, "log": entry.log}
    optional = {"store": entry.store, "deadline": entry.deadline, "ray_auth_mode": entry.ray_auth_mode}
    optional["ray_auth_token_path"] = entry.ray_auth_token_path
    for key, value in [*texts.items(), *optional.items()]:
        if not isinstance(value, str) and not (key in optional and value is None):
            return f"{key}: expected text, got {shown(value)}"
        if value is not None and control_characters(value):
            return refuse_control(key, value)
    if not is_safe_name(entry.plan):
        return f"plan: {shown(entry.plan)} is not a plan name"
    if entry.id != eid:
        return f"id {shown(entry.id)} is not the file's name"
    if entry.id != entry_id(Path(entry.cluster), entry.plan):
        return "its id does not match its cluster file and plan"
    if not (_CRON.fullmatch(entry.cron) and CronSlices.is_valid(entry.cron)):
        return f"cron: invalid cron expression {shown(entry.cron)}"
    for key in ("cluster", "log", "store", "ray_auth_token_path"):
        value = getattr(entry, key)
        if value is not None and not (key == "store" and is_url(value)) and not Path(value).is_absolute():
            return f"{key}: expected an absolute path, got {shown(value)}"
    if entry.ray_auth_mode is not None and entry.ray_auth_mode not in AUTH_MODES:
        return f"ray_auth_mode: expected one of {', '.join(AUTH_MODES)}, got {shown(entry.ray_auth_mode)}"
    if entry.deadline is not None:
        try:
            parse_deadline(entry.deadline)
        except InputError as exc:
            return f"deadline: {exc}"
    return None


def write_entry(folder: Path, entry: Entry) -> None:
    """The entry file, 0600 in a 0700 folder made here if absent; an existing folder must already be
    safe (refused, with why, otherwise)."""
    if not folder.exists() and not folder.is_symlink():
        folder.mkdir(parents=True, mode=0o700)
    dir_fd = _open_folder(folder)
    try:
        text = json.dumps(dataclasses.asdict(entry), indent=1) + "\n"
        tmp = f".{entry.id}.json.tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as file:
            file.write(text.encode("utf-8", "surrogateescape"))
        os.replace(tmp, f"{entry.id}.json", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


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


def _is_begin(text: str) -> bool:
    return text.strip().startswith("# BEGIN labprobe schedule")


def _is_end(text: str) -> bool:
    return text.strip().startswith(END)


def split(text: str) -> Crontab:
    """The crontab's lines and every labprobe block in it. Lines end at newlines only, as cron reads
    them (str.splitlines would also cut at form feeds and U+2028 inside the user's own lines). Markers
    must pair up, one block after another: a BEGIN with no END, a BEGIN inside a block and an END outside
    one are refused (which lines are labprobe's is then anyone's guess: `BEGIN BEGIN <line> END <curl|sh>
    END` read leniently left the curl line outside every block, kept by `remove --all`)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    parts: list[str | list[str]] = []
    block: list[str] | None = None
    for number, text_line in enumerate(lines, start=1):
        if _is_begin(text_line) and block is not None:
            raise InputError(f"crontab line {number}: a second {BEGIN!r} inside labprobe's block: mend it by hand")
        if _is_end(text_line) and block is None:
            raise InputError(f"crontab line {number}: an {END!r} line outside labprobe's block: mend it by hand")
        if _is_begin(text_line):
            block = []
        elif _is_end(text_line):
            parts.append(block)
            block = None
        elif block is not None:
            block.append(text_line)
        else:
            parts.append(text_line)
    if block is not None:
        raise InputError(f"the crontab has labprobe's {BEGIN!r} line but no {END!r} after it: mend it by hand")
    return Crontab(parts)


def join(crontab: Crontab) -> str:
    body: list[str] = []
    for part in crontab.parts:
        if isinstance(part, list):
            body += [BEGIN, *part, END] if part else []
        else:
            body.append(part)
    return "\n".join(body) + "\n" if body else ""


def line_id(text: str) -> str | None:
    """The entry id a block line names (its last 16-hex word, so an edited line is still traced)."""
    found = re.findall(r"(?<![0-9a-f])[0-9a-f]{16}(?![0-9a-f])", text)
    return found[-1] if found else None


def line_folder(text: str, default: Path) -> Path:
    """The entries folder a block line names (its `--entries DIR`), else `default`."""
    try:
        words = shlex.split(text)
    except ValueError:
        return default
    if "--entries" in words[:-1]:
        return Path(words[words.index("--entries") + 1])
    return default


def verify(text_line: str, folder: Path) -> Entry:
    """The entry a block line runs, when labprobe wrote both; InputError saying why not."""
    eid = line_id(text_line)
    if eid is None:
        raise InputError("it names no entry id")
    where = line_folder(text_line, folder)
    entry = read_entry(where, eid)
    if line(entry, where) != text_line:
        raise InputError("it differs from what its entry file renders")
    return entry


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
    store: str | None = None,
    prepare_log: Callable[[Path], object] = lambda path: path.parent.mkdir(parents=True, exist_ok=True),
) -> tuple[str, Entry]:
    """The crontab with the plan's entry added (replacing one for the same plan and cluster file) in
    the first labprobe block, and the entry, whose file is written here. `prepare_log(log)` readies the
    log's folder (the CLI's refuses one it cannot write, and makes missing folders only in the store)."""
    entry = new_entry(cluster, plan=plan, cron=cron, deadline=deadline, log=log, store=store)
    if os.path.islink(entry.log):  # `run` opens it without following links: it would fail every night
        raise InputError(f"--log {entry.log}: a symbolic link: `schedule run` never appends through one; name the file")
    crontab = split(text)
    for block in crontab.blocks():
        block[:] = [x for x in block if line_id(x) != entry.id]
    if not crontab.blocks():
        crontab.parts.append([])
    crontab.blocks()[0].append(line(entry, folder))
    prepare_log(Path(entry.log))
    write_entry(folder, entry)
    return join(crontab), entry


def new_entry(
    cluster: Cluster,
    *,
    plan: str | None,
    cron: str | None,
    deadline: str | None,
    log: Path | None,
    store: str | None = None,
) -> Entry:
    defaults = cluster.spec.schedule
    plan = plan or (defaults.plan if defaults else None)
    cron = cron or (defaults.cron if defaults else None)
    deadline = deadline if deadline is not None else (defaults.deadline if defaults else None)
    if plan is None or cron is None:
        missing = "--plan" if plan is None else "--cron"
        raise InputError(f"{missing}: not given, and {cluster.path.name} has no schedule section to default from")
    checked = (("--plan", plan), ("--cron", cron), ("--deadline", deadline), ("--cluster", cluster.path))
    for flag, value in (*checked, ("--store", store)):
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
    mode, token_path = _auth_settings()
    return Entry(
        id=entry_id(cluster.path, plan),
        cron=" ".join(cron.split()),
        cluster=str(cluster.path),
        plan=plan,
        store=None if store is None else (store if is_url(store) else str(Path(store).absolute())),
        deadline=deadline,
        log=str(log_path),
        ray_auth_mode=mode,
        ray_auth_token_path=token_path,
    )


def remove(text: str, folder: Path, *, cluster_path: Path | None, plan: str | None) -> tuple[str, int]:
    """The crontab without labprobe's entries of one plan, or of every plan of a cluster file, or
    (both None) without every labprobe block, and older-format entries too; -> (text, number removed).
    An entry file is deleted only for a line labprobe wrote (a planted line names no file to delete)."""
    crontab = split(text)
    removed = 0
    every = cluster_path is None and plan is None
    for block in crontab.blocks():
        kept = []
        for text_line in block:
            entry = _verified_or_none(text_line, folder)
            if every or (
                entry is not None
                and (cluster_path is None or entry.cluster == str(cluster_path))
                and (plan is None or entry.plan == plan)
            ):
                removed += bool(text_line.strip())
                if entry is not None:
                    (line_folder(text_line, folder) / f"{entry.id}.json").unlink(missing_ok=True)
            else:
                kept.append(text_line)
        block[:] = kept
    if every:
        older = [x for x in crontab.parts if isinstance(x, str) and f"# {TAG} " in x]
        removed += len(older)
        crontab.parts = [x for x in crontab.parts if not (isinstance(x, str) and x in older)]
    return join(crontab), removed


def show(text: str, folder: Path) -> tuple[list[Entry], list[str]]:
    """labprobe's entries, and one line per problem: a line inside any block that labprobe did not
    write or whose entry file is refused (saying which file and why), a second block, an older entry."""
    crontab = split(text)
    entries, problems = [], []
    blocks = crontab.blocks()
    if len(blocks) > 1:
        problems.append(
            f"the crontab holds {len(blocks)} labprobe blocks (labprobe writes one): "
            "`schedule remove --all` removes every one"
        )
    number = 0
    for block in blocks:
        for text_line in block:
            number += 1
            if not text_line.strip():
                continue
            try:
                entries.append(verify(text_line, folder))
            except InputError as exc:
                problems.append(f"NOT WRITTEN BY LABPROBE (block line {number}: {exc}): {shown(text_line)}")
    for text_line in (x for x in crontab.parts if isinstance(x, str)):
        if f"# {TAG} " in text_line:
            problems.append(
                f"older labprobe entry (a shell line): remove it with `schedule remove --all`: {shown(text_line)}"
            )
    return entries, problems


def _verified_or_none(text_line: str, folder: Path) -> Entry | None:
    try:
        return verify(text_line, folder)
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


def _auth_settings() -> tuple[str | None, str | None]:
    """The Ray auth mode and token path a driver joining a token-auth cluster needs (host-command asks
    the same of every driver), as set here; never a token itself."""
    mode = os.environ.get("RAY_AUTH_MODE") or None
    if mode is not None and mode not in AUTH_MODES:
        raise InputError(f"RAY_AUTH_MODE: expected one of {', '.join(AUTH_MODES)}, got {shown(mode)}")
    token = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return mode, str(Path(token).absolute()) if token else None


def sweep_argv(entry: Entry) -> list[str]:
    """The sweep an entry stands for, built here from its checked values: labprobe's own words only."""
    argv = labprobe_command() + ["sweep", "--cluster", entry.cluster, "--plan", entry.plan, "--report"]
    argv += ["--deadline", entry.deadline] if entry.deadline else []
    argv += ["--store", entry.store] if entry.store else []
    return argv


def run(folder: Path, eid: str) -> int:
    """Run entry `eid`'s sweep from its cluster file's folder, its output appended to its log; its exit code."""
    entry = read_entry(folder, eid)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    env.update({"RAY_AUTH_MODE": entry.ray_auth_mode} if entry.ray_auth_mode else {})
    env.update({"RAY_AUTH_TOKEN_PATH": entry.ray_auth_token_path} if entry.ray_auth_token_path else {})
    fd = _open_log(entry.log)
    with os.fdopen(fd, "ab") as log:
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        log.write(f"== labprobe sweep {entry.plan} {stamp}\n".encode())
        log.flush()
        cwd = str(Path(entry.cluster).parent)
        try:
            return subprocess.run(sweep_argv(entry), cwd=cwd, env=env, stdout=log, stderr=log, check=False).returncode
        except OSError as exc:  # the folder or the labprobe gone since install
            log.write(f"cannot start the sweep: {exc}\n".encode())
            raise InputError(f"schedule entry {eid}: cannot start the sweep: {exc.strerror or exc}") from None


def _open_log(path: str) -> int:
    """The sweep's log opened to append: never through a link (a link planted where the log goes is not
    appended to), never waiting (a FIFO there held `run` for ever, the night's sweep never started),
    a regular file only."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        why = "not a regular file (a FIFO)" if exc.errno == errno.ENXIO else exc.strerror or str(exc)
        raise InputError(f"{path}: cannot append the sweep's log: {why}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{path}: cannot append the sweep's log: not a regular file")
    os.set_blocking(fd, True)
    return fd


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
    root = cluster.store_root()
    # The shell appends the sweep's output line by line: an object cannot take that, so a store on an
    # object store has its cron log beside the cluster file.
    return (cluster.base if is_url(root) else Path(root)) / LOGS / f"sweep-{plan}.log"


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
