"""`labprobe schedule install|remove|show`: the overnight sweep's crontab entry."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.lab.cluster import load_cluster
from runner.lab.schedule import (
    install,
    labprobe_entries,
    read_crontab,
    remove,
    write_crontab,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    install = actions.add_parser("install", help="add or replace the sweep's entry")
    remove = actions.add_parser("remove", help="delete the sweep's entry (one plan, or all of a cluster file)")
    show = actions.add_parser("show", help="list labprobe's entries")
    for sub, says in (
        (install, "edit this file instead of the user's crontab (created if absent)"),
        (remove, "edit this file instead of the user's crontab"),
        (show, "read this file instead of the user's crontab (nothing is changed)"),
    ):
        sub.add_argument("--crontab-file", type=Path, metavar="FILE", help=says)
    for sub in (install, remove):
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
    remove.add_argument("--all", action="store_true", help="remove every labprobe entry, of any cluster file")


def main(args: argparse.Namespace) -> int:
    tab = read_crontab(args.crontab_file)
    if args.action == "install":
        cluster = load_cluster(args.cluster)
        entry = install(tab, cluster, plan=args.plan, cron=args.cron, deadline=args.deadline, log=args.log)
        write_crontab(tab, args.crontab_file)
        print(f"installed: {entry.slices} {entry.command}")
    elif args.action == "remove":
        cluster_path = args.cluster.resolve()
        num_removed = remove(tab, cluster_path=None if args.all else cluster_path, plan=args.plan)
        if num_removed:
            write_crontab(tab, args.crontab_file)
        print(f"removed {num_removed} entr{'y' if num_removed == 1 else 'ies'}")
    else:
        entries = labprobe_entries(tab)
        for entry in entries:
            print(f"{entry.slices}  {entry.comment}\n    {entry.command}")
        if not entries:
            print("no labprobe entries")
    return 0
