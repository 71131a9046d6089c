"""`labprobe schedule install|remove|show|run`: the overnight sweep's crontab entry (runner.lab.schedule).

The crontab line runs one fixed command, `labprobe schedule run --entries DIR ID`; the entry file
DIR/ID.json that `install` wrote holds data only (cluster file, plan, store, deadline, log), and `run`
builds the sweep's command from it. The file and DIR must be yours and writable by nobody else, and no
link. Plan names may hold only letters, digits, '.', '_' and '-'; newlines and other control
characters are refused everywhere. `show` flags (exit 1) any line in any labprobe block that labprobe
did not write, or whose entry file is refused, saying which file and why.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.cli.outputs import add_mkdir_option, writable_file
from runner.lab import schedule as sched
from runner.lab.cluster import load_cluster
from runner.store.root import is_url

EPILOG = (
    "The crontab line runs one fixed command, `labprobe schedule run --entries DIR ID`; the cluster file, "
    "plan, store, deadline and log are read from DIR/ID.json, which install wrote, and the sweep's command "
    "is built by labprobe and started without a shell. DIR and its files must belong to you and be "
    "writable by nobody else (no links): run and show refuse them otherwise, saying why. Plan, checkpoint, corpus and host names may hold only letters, digits, '.', "
    "'_' and '-' (labprobe validate checks them); newlines and other control characters are refused. "
    "labprobe's lines sit between '# BEGIN labprobe schedule' and '# END labprobe schedule'; show flags "
    "(exit 1) any line there labprobe did not write, and remove --all removes every such block."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    install = actions.add_parser("install", help="add or replace the sweep's entry (and its entry file)")
    remove = actions.add_parser("remove", help="delete the sweep's entry (one plan, or all of a cluster file)")
    show = actions.add_parser(
        "show", help="list labprobe's entries (nothing is changed); flag lines in its block it did not write"
    )
    run = actions.add_parser("run", help="what cron runs: the sweep of entry ID, output appended to its log")
    run.add_argument("id", metavar="ID", help="the entry's id (16 hex digits), as the crontab line names it")
    for sub in (install, remove, show, run):
        sub.add_argument(
            "--entries",
            type=Path,
            metavar="DIR",
            help="the entry files' folder (default: $LABPROBE_SCHEDULE_DIR, else ~/.local/state/labprobe/schedule)",
        )
    for sub, says in (
        (install, "edit this file instead of the user's crontab (created if absent)"),
        (remove, "edit this file instead of the user's crontab"),
        (show, "read this file instead of the user's crontab (nothing is changed)"),
    ):
        sub.add_argument("--crontab-file", type=Path, metavar="FILE", help=says)
    for sub in (install, remove):
        add_mkdir_option(sub)
        sub.add_argument(
            "--cluster",
            type=Path,
            default=Path("cluster.yaml"),
            metavar="F",
            help="the cluster file (default: ./cluster.yaml)",
        )
        sub.add_argument("--plan", metavar="P", help="the sweep plan (default: the schedule section's)")
    install.add_argument(
        "--cron",
        metavar="EXPR",
        help="when to run, a cron expression such as '0 1 * * *' (default: the schedule section's)",
    )
    install.add_argument(
        "--deadline", metavar="HH:MM", help="no job starts after this time of day (default: the schedule section's)"
    )
    install.add_argument(
        "--log",
        type=Path,
        metavar="F",
        help="append the sweep's output here (default: the schedule section's, else <store>/logs/sweep-<plan>.log)",
    )
    install.add_argument("--store", metavar="DIR", help="the store the sweep writes to (default: the cluster file's)")
    remove.add_argument(
        "--all", action="store_true", help="remove every labprobe block (and its lines), of any cluster file"
    )


def main(args: argparse.Namespace) -> int:
    folder = sched.entries_dir(args.entries)
    if args.action == "run":
        return sched.run(folder, args.id)
    if args.action in ("install", "remove") and args.crontab_file is not None:
        writable_file(args.crontab_file, what="--crontab-file", mkdir=args.mkdir)
    text = sched.read_crontab(args.crontab_file)
    if args.action == "install":
        cluster = load_cluster(args.cluster)
        root = cluster.store_root()
        store = None if is_url(root) else Path(root)

        def prepare_log(log: Path) -> None:  # a log the cluster file names (or the default) is the lab's word
            writable_file(log, what="--log" if args.log else "log", mkdir=args.mkdir or not args.log, make_under=store)

        text, entry = sched.install(
            text,
            cluster,
            folder,
            plan=args.plan,
            cron=args.cron,
            deadline=args.deadline,
            log=args.log,
            store=args.store,
            prepare_log=prepare_log,
        )
        sched.write_crontab(text, args.crontab_file)
        print(
            f"installed: {sched.line(entry, folder)}\n    plan {entry.plan}, cluster {entry.cluster}, log {entry.log}"
        )
        return 0
    if args.action == "remove":
        cluster_path = None if args.all else args.cluster.resolve()
        text, num_removed = sched.remove(text, folder, cluster_path=cluster_path, plan=None if args.all else args.plan)
        if num_removed:
            sched.write_crontab(text, args.crontab_file)
        print(f"removed {num_removed} entr{'y' if num_removed == 1 else 'ies'}")
        return 0
    entries, problems = sched.show(text, folder)
    for entry in entries:
        deadline = f", deadline {entry.deadline}" if entry.deadline else ""
        print(f"{entry.cron}  plan {entry.plan}{deadline}  cluster {entry.cluster}\n    log {entry.log}  id {entry.id}")
    if not entries:
        print("no labprobe entries")
    for problem in problems:
        print(problem)
    return 1 if problems else 0
