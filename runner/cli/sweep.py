"""`labprobe sweep`: run a plan of probes over the lab's hosts with Ray; results into the store.

    labprobe sweep [--cluster F] [--plan P] [--address A] [--store D] [--force]
                   [--deadline HH:MM] [--report] [--timeout-s N] [--gpu-wait-s N]
                   [--connect-timeout-s N] [--json]

Expands the plan into jobs (runner.lab.plan), fingerprints each host's checkpoints on that host,
skips jobs already stored ok (unless --force), dispatches the rest as pinned Ray tasks
(runner.dispatch.loop), writes each result as it arrives, shows progress per host, and ends with the
per-host comparison (`--json`: one JSON object instead). It records its plan's work in
`<store>/runs/<run id>.json` (what `labprobe report --run` shows for it, even when every job was
already done) as soon as it holds the store's lock, and there its end: ok, or why the night went
wrong (the cluster unreachable, the deadline passed, jobs failed, the store stopped, interrupted,
died), which `labprobe status` and `labprobe report` lead with the next morning and ends by compacting the store and vacuuming what compaction replaced more than the
cluster file's `store.vacuum_retention_days` ago. Exit 0 when every job ran (GPU jobs skipped
because their GPU stayed busy, and deadline skips, included: the report names them), 1 when some
failed, when a GPU job was skipped because its host's GPUs could not be read (unreadable is not
busy), or when the store stopped taking results, 2 on bad input, when
another sweep holds the store's lock, when the store cannot be written (checked before any job runs)
and when no usable Ray head answers at the address within --connect-timeout-s.

Ray's own output (its banners, warnings, a dead node's raylet log tail) goes to the run's log file,
`<store>/logs/ray-<run id>.log`, not to the terminal. When the Ray head is lost mid-sweep (its port
unreachable for 30 s; Ray itself would kill this driver at 60 s), the run's unfinished jobs are
stored failed ("Ray head lost"), the summary printed, exit 1.

No --address (and no `ray.address` in the cluster file): an embedded local Ray on this machine,
one node labelled `labprobe.host=local`. Only plan entries naming the host `local` run there;
jobs for other hosts fail at once with "no alive Ray node carries ...". The bundled `demo` plan
names `local`, so `labprobe sweep` from the repo root runs it end to end on a fresh machine.
We do not pretend this machine is gx10 and ana-ml2: a per-host comparison of one machine under
two names would be a lie in the store.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from probes.result import InputError
from runner.analysis.answers import answers_text
from runner.analysis.report_runs import end_run, write_run
from runner.cli.options import nonneg_seconds, positive_seconds
from runner.cli.stores import add_store_option, open_store
from runner.clock import new_run_id, parse_deadline
from runner.dispatch.interrupt import connect_or_one_line, interrupted_once
from runner.dispatch.lock import SweepLock
from runner.dispatch.loop import Counts, gpu_wait_lines
from runner.dispatch.placement import gpu_skip_kind
from runner.dispatch.sweep import night_failure, night_outcome, run_sweep
from runner.hosts.nodes import (
    warn_embedded,
)
from runner.hosts.reach import DEFAULT_CONNECT_TIMEOUT_S
from runner.lab.cluster import load_cluster
from runner.lab.plan import DEFAULT_PLAN, Job, expand
from runner.log import foreign_output_to, say
from runner.log import setup as setup_logging
from runner.store.store import Store

MAX_FAILURES_SHOWN = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default="cluster.yaml", help="the cluster file (default: ./cluster.yaml)")
    parser.add_argument("--plan", default=DEFAULT_PLAN, help=f"plan to run (default: {DEFAULT_PLAN})")
    parser.add_argument(
        "--address",
        help="Ray address (host:port or auto; `local`: the embedded Ray); "
        "default: the cluster file's ray.address, else the embedded local Ray (host `local`)",
    )
    add_store_option(parser)
    parser.add_argument("--force", action="store_true", help="run jobs already stored ok again")
    parser.add_argument(
        "--deadline",
        metavar="HH:MM",
        help="local time after which no job starts (the "
        "occurrence nearest to now: within the past 12 h it is already past)",
    )
    parser.add_argument("--report", action="store_true", help="write the HTML report of this run")
    parser.add_argument("--timeout-s", type=positive_seconds, default=3600.0, help="per-job timeout (default: 3600)")
    parser.add_argument(
        "--inline",
        metavar="HOST",
        help="no Ray: run the plan's jobs for HOST one by one in "
        "this process (you are on HOST: debugging, or a GPU box on its own)",
    )
    parser.add_argument(
        "--gpu-wait-s",
        type=nonneg_seconds,
        default=1800.0,
        help="without --deadline: how long GPU jobs wait for an idle card (default: 1800)",
    )
    parser.add_argument(
        "--lock-wait-s",
        type=nonneg_seconds,
        default=0.0,
        help="when another sweep or chore holds the store (another host's, on a shared store): wait up to "
        "this long for it to end instead of refusing (default: 0, refuse at once)",
    )
    parser.add_argument(
        "--connect-timeout-s",
        type=positive_seconds,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        help=f"how long to wait for the Ray head at --address (default: {DEFAULT_CONNECT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="end with one JSON object (run id, counts, failures, "
        "every job's outcome) instead of the summary and the comparison",
    )


def main(args: argparse.Namespace) -> int:
    """The sweep, with Ctrl-C handled once (runner.dispatch.interrupt): exit 130, Ray shut down."""
    return interrupted_once(lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    cluster = load_cluster(args.cluster)
    jobs = expand(cluster, args.plan)
    store = open_store(args.store, cluster)
    deadline = parse_deadline(args.deadline) if args.deadline else None
    if args.inline is not None:
        jobs = [j for j in jobs if j.host == args.inline]
        if not jobs:
            raise InputError(f"--inline: plan {args.plan!r} has no job on host {args.inline!r}")
    run_id = new_run_id()
    store.place.check_writable()  # before Ray starts or any job runs: a full disk, a missing bucket: one line, exit 2
    work = [(j.probe, j.host, j.checkpoint, j.config_hash) for j in jobs]
    setup_logging()
    hosts = list(cluster.hosts)
    ray_log = f"ray-{run_id}.log"
    log_file = store.place.log_file(ray_log)  # on an object store a local file, copied into logs/ at the end
    with (
        SweepLock(store.place, run_id=run_id, plan=args.plan, wait_s=args.lock_wait_s) as lock,
        store.place.keeping_log(log_file, ray_log),  # after Ray's output is closed: entered first, left last
        foreign_output_to(log_file) as (out, _),
        recording_the_night(store, run_id),  # a night that fails from here on is a run record with the reason
    ):
        write_run(store, run_id, plan=args.plan, work=work, hosts=hosts)  # `running`; what `report --run` shows
        if args.inline is None:
            _connect(args, cluster, jobs, run_id)

        def head_lost(counts: Counts) -> None:  # runs on the head-watch thread; Ray would kill us soon
            _print_end(args, store, jobs, counts, run_id, hosts, out)
            end_run(store, run_id, "failed", counts.failures[0][1] if counts.failures else "the Ray head was lost")
            out.flush()
            os._exit(1)

        counts = run_sweep(
            cluster=cluster,
            store=store,
            plan=args.plan,
            jobs=jobs,
            run_id=run_id,
            force=args.force,
            deadline=deadline,
            timeout_s=args.timeout_s,
            gpu_wait_s=args.gpu_wait_s,
            inline=args.inline is not None,
            on_head_lost=None if args.inline is not None else head_lost,
            lock=lock,
        )
        store.compact()  # the night's small files into few, and a log checkpoint: reads stay fast
        store.vacuum(cluster.spec.store.vacuum_retention_days)  # files replaced longer ago than that
        end_run(store, run_id, *night_outcome(counts))
    _print_end(args, store, jobs, counts, run_id, hosts, sys.stdout)
    if args.report and counts.store_failure is None:
        _report(store, run_id, work, cluster)
    return 1 if counts.failed or counts.unreadable or counts.store_failure else 0


def _connect(args: argparse.Namespace, cluster, jobs: list[Job], run_id: str) -> None:
    """Join the lab's Ray cluster (or start the embedded one); one line, exit 2, where none answers."""
    address = args.address or cluster.spec.ray.address
    say(f"labprobe sweep: run {run_id}, plan {args.plan!r}, {len(jobs)} job(s); connecting to Ray")
    connect_or_one_line(address, args.connect_timeout_s)
    warn_embedded(
        "sweep", address, {j.host for j in jobs}, "jobs for {hosts} will fail (pass --address or set ray.address)"
    )


@contextlib.contextmanager
def recording_the_night(store: Store, run_id: str) -> Iterator[None]:
    """A sweep that stops before its end (the cluster unreachable, Ctrl-C, an error) records why in its run
    record, so the morning's `report` and `status` lead with it; the exception goes on."""
    try:
        yield
    except BaseException as exc:
        end_run(store, run_id, *night_failure(exc))
        raise


def _print_end(args, store: Store, jobs: list[Job], counts, run_id: str, hosts: list[str], out: TextIO) -> None:
    if args.json:
        json.dump(end_json(store, counts, run_id), out, indent=1)
        print(file=out)
    else:
        print_end(store, jobs, counts, run_id, hosts, out=out)


def print_end(
    store: Store, jobs: list[Job], counts: Counts, run_id: str, host_order: list[str], *, out: TextIO | None = None
) -> None:
    out = out or sys.stdout
    print(
        f"run {run_id}: {counts.ok} ok, {counts.failed} failed, {counts.skipped} skipped, "
        f"{counts.already_done} already done (store {store.root})",
        file=out,
    )
    for line in failure_lines(counts.failures):
        print(line, file=out)
    for line in gpu_wait_lines(counts)[:MAX_FAILURES_SHOWN]:
        print(line, file=out)
    unread = [(j, r) for j, status, r in counts.outcomes if status == "skipped" and gpu_skip_kind(r) == "unreadable"]
    for job, reason in unread[:MAX_FAILURES_SHOWN]:
        print(f"  not run, host unreadable: {job.probe} {job.checkpoint} @ {job.host}: {reason}", file=out)
    if counts.store_failure is not None:
        print(
            f"the store stopped taking results ({counts.store_failure}); the {counts.num_spilled} jobs after "
            f"that are kept in {counts.spilled_to} (JSON lines: runner.dispatch.spill.read_spill)",
            file=out,
        )
        return
    text = end_answers(store, jobs, run_id, host_order)
    if text:
        print(file=out)
        print(text, file=out)


def failure_lines(failures: list[tuple[Job, str]], *, named: int = 3) -> list[str]:
    """Failures grouped by their reason: one line per cause (28 jobs on a host no node carries are one
    line), naming a few of its jobs; at most MAX_FAILURES_SHOWN causes."""
    by_reason: dict[str, list[Job]] = {}
    for job, reason in failures:
        by_reason.setdefault(reason, []).append(job)
    lines = []
    for reason, jobs in list(by_reason.items())[:MAX_FAILURES_SHOWN]:
        which = ", ".join(f"{j.probe} {j.checkpoint} @ {j.host}" for j in jobs[:named])
        if len(jobs) == 1:
            lines.append(f"  failed: {which}: {reason}")
        else:
            more = f" and {len(jobs) - named} more" if len(jobs) > named else ""
            lines.append(f"  failed, {len(jobs)} jobs: {reason} ({which}{more})")
    if len(by_reason) > MAX_FAILURES_SHOWN:
        lines.append(f"  ... and {len(by_reason) - MAX_FAILURES_SHOWN} more causes (the store's jobs table has all)")
    return lines


def end_answers(store: Store, jobs: list[Job], run_id: str, host_order: list[str]) -> str:
    """What the sweep's probes found, per host: the text after the summary line (runner/analysis)."""

    work = [(j.probe, j.host, j.checkpoint, j.config_hash) for j in jobs]  # the sweep's answers (analysis)
    return answers_text(store, run_id, work=work, host_order=host_order)


def end_json(store: Store, counts: Counts, run_id: str) -> dict[str, Any]:
    """`sweep --json`: the run as one JSON object."""

    def job(j: Job) -> dict[str, str]:
        return {"job_id": j.job_id, "probe": j.probe, "checkpoint": j.checkpoint, "host": j.host}

    return {
        "run_id": run_id,
        "store": str(store.root),
        "counts": {
            "ok": counts.ok,
            "failed": counts.failed,
            "skipped": counts.skipped,
            "unreadable": counts.unreadable,
            "already_done": counts.already_done,
        },
        "failures": [{**job(j), "reason": reason} for j, reason in counts.failures],
        "jobs": [{**job(j), "status": status, "reason": reason} for j, status, reason in counts.outcomes],
        "gpu_waits": [
            {**job(j), "status": status, "gpu_wait_s": round(waited, 1), "why": why, "card": card}
            for j, status, waited, why, card in counts.gpu_waits
        ],
        "store_failure": counts.store_failure,
        "spilled_to": None if counts.spilled_to is None else str(counts.spilled_to),
    }


def _report(store: Store, run_id: str, work: list[tuple[str, str, str, str]], cluster) -> None:
    """The same report as `labprobe report --run ID` (runner.cli.report)."""
    # imported here: the report's plots import matplotlib, ~3 CPU-s of every sweep's start without --report
    from runner.analysis.report import write_report

    path, text = write_report(store, run_id, work=work, cluster=cluster)
    print(text)
    print(f"report: {path}")
