"""What each probe answered, per host and checkpoint: the end of a sweep and the report's findings.

`answers(store, run_id, work=...)` takes the work of a sweep (probe, host, checkpoint, config hash
per job; by default the jobs the run stored) and, for each, the newest ok job of that work in the
store. When this run's attempt failed or was skipped (a node died, say), the newest ok value of an
earlier run is shown, marked `earlier` with its run id, rather than nothing. Each answer holds the
probe's headline figures, computed from its stored rows by the probe's own answer module (`ProbeSpec.answer`,
e.g. probes/carrier/answer.py: tok/s, step time, spread and trust per model); a probe without one gets its
summary's scalar figures.

Ratios to a baseline host (the first of `host_order` with a value) are given only where two or more
hosts answered, and only for what the host measures (the answer's RATIO_OF: carrier tok/s). `changes`
lists the exact figures (an answer marked EXACT: mask, padding, bucket) that differ from the previous ok run
of the same work. What the answer's presentation declares (`Presentation.one_row_per_tokenizer`,
`checks_are_answer`) shapes its rows.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
import pyarrow.dataset as ds

import probes
from probes.format import shown_pct
from runner.analysis import answer_figures as figs
from runner.store.store import Store
from runner.tables import format_value

WORK_KEY = ("probe", "host", "checkpoint", "config_hash")
CHECKS_FAILED = "checks failed: "


@dataclasses.dataclass
class Answer:
    probe: str
    host: str
    checkpoint: str
    config_hash: str
    outcome: str
    """This run's outcome for the work: ok, failed, skipped, or `stored` (no job this run: done before)."""
    reason: str
    """This run's reason: why it failed or was skipped, or the checks that failed."""
    run_id: str | None
    """The run whose figures are shown; None when the work was never done ok."""
    earlier: bool
    """The figures are an earlier run's (this run's attempt failed, was skipped, or was not needed)."""
    figures: list[dict[str, Any]]
    """One dict per answer row (a carrier family: one per model and variant); empty when never ok."""
    notes: list[str]
    changes: list[str]
    """The exact figures that differ from `previous_run`'s (timings are drift's business)."""
    previous_run: str | None = None
    """The ok run before the one shown, that `changes` compares with; None when there was none."""
    merged: tuple[tuple[str, str], ...] = ()
    """(checkpoint, config_hash) of each work one row stands for (padding and bucket checkpoints sharing
    a tokenizer); empty for a row of its own work."""


@dataclasses.dataclass
class ProbeAnswers:
    probe: str
    question: str
    hosts: list[str]
    baseline: str | None
    """The host ratios are relative to; None with fewer than two hosts answering (no ratios)."""
    ratio_of: str | None
    answers: list[Answer]


def answers(
    store: Store,
    run_id: str,
    *,
    work: Iterable[tuple[str, str, str, str]] | None = None,
    host_order: list[str] | None = None,
) -> list[ProbeAnswers]:
    """Per probe (in the work's order), the answer of each host x checkpoint. See the module doc."""
    jobs = store.jobs()
    names = set(store.table_names())

    def read(name: str, runs: set[str]) -> pd.DataFrame:
        # Only the runs shown and compared with: a store of years holds hundreds of others.
        if name not in names:
            return pd.DataFrame()
        return store.read(name, jobs=jobs, filters=ds.field("run_id").isin(sorted(runs)))

    return build(jobs, read, run_id, work=work, host_order=host_order)


Reader = Callable[[str, set[str]], pd.DataFrame]
"""(table name, run ids) -> the table's rows, at least those of these runs."""


def build(
    jobs: pd.DataFrame,
    read: Reader,
    run_id: str,
    *,
    work: Iterable[tuple[str, str, str, str]] | None = None,
    host_order: list[str] | None = None,
) -> list[ProbeAnswers]:
    """`answers` over frames already read: `jobs` (all job rows) and `read(table_name, run_ids)`."""
    jobs = _plain_strings(jobs.sort_values("finished_at", kind="stable")) if not jobs.empty else jobs
    if work is None:  # the run's own jobs, probes in the usual order (a plan's order when given)
        mine = jobs[jobs["run_id"] == run_id] if not jobs.empty else jobs
        work = list(mine[list(WORK_KEY)].itertuples(index=False, name=None)) if not mine.empty else []
        order = figs.order()
        work.sort(key=lambda w: order.index(w[0]) if w[0] in order else len(order))
    work = list(dict.fromkeys(tuple(w) for w in work))
    groups = jobs.groupby(list(WORK_KEY), sort=False).indices if not jobs.empty else {}
    runs = _runs_read(jobs, work)
    rows_of = _indexed(lambda name: read(name, runs))
    sections = []
    for probe in dict.fromkeys(w[0] for w in work):
        found = [_answer(jobs.iloc[groups.get(key, [])], key, run_id, rows_of) for key in work if key[0] == probe]
        sections.append(_section(probe, found, host_order or []))
    return sections


def _runs_read(jobs: pd.DataFrame, work: list[tuple[str, str, str, str]]) -> set[str]:
    """The runs whose rows the answers read: each work's newest ok job and the ok one before it."""
    if jobs.empty or not work:
        return set()
    ok = jobs[jobs["status"] == "ok"]
    ok = ok[pd.MultiIndex.from_frame(ok[list(WORK_KEY)]).isin(work)]
    return set(ok.groupby(list(WORK_KEY), sort=False).tail(2)["run_id"].astype(str))


def _plain_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """Arrow-backed string columns as Python objects: a frame read from many files holds them in as
    many chunks, and every row selection (`iloc`) then costs a take over all of them (measured:
    150 ms for 3 rows of a table from 1,000 files, 1 ms after this one conversion)."""
    text = {c: object for c in frame.columns if pd.api.types.is_string_dtype(frame[c]) and frame[c].dtype != object}
    return frame.astype(text) if text else frame


RowsOf = Callable[[str, pd.Series], pd.DataFrame]
"""(table name, job row) -> that job's rows of the table."""


def _indexed(read: Callable[[str], pd.DataFrame]) -> RowsOf:
    """One job's rows through an index built once per table: a store of years has thousands of
    jobs, and filtering a whole table for each would be quadratic."""
    indexed: dict[str, tuple[pd.DataFrame, dict]] = {}

    def rows_of(name: str, job: pd.Series) -> pd.DataFrame:
        if name not in indexed:
            frame = _plain_strings(read(name))
            index = frame.groupby(["job_id", "run_id"], sort=False).indices if not frame.empty else {}
            indexed[name] = (frame, index)
        frame, index = indexed[name]
        return frame.iloc[index.get((job["job_id"], job["run_id"]), [])].reset_index(drop=True)

    return rows_of


def _answer(rows: pd.DataFrame, key: tuple[str, str, str, str], run_id: str, rows_of: RowsOf) -> Answer:
    probe, host, checkpoint, config_hash = key
    attempt = rows[rows["run_id"] == run_id].tail(1)
    ok = rows[rows["status"] == "ok"]
    outcome = attempt["status"].iloc[0] if len(attempt) else "stored"
    reason = str(attempt["reason"].iloc[0] or "") if len(attempt) else ""
    answer = Answer(
        probe=probe,
        host=host,
        checkpoint=checkpoint,
        config_hash=config_hash,
        outcome=outcome,
        reason=reason,
        run_id=None,
        earlier=False,
        figures=[],
        notes=[],
        changes=[],
    )
    if ok.empty:
        return answer
    shown = ok.iloc[-1]
    answer.run_id, answer.earlier = str(shown["run_id"]), str(shown["run_id"]) != run_id
    answer.figures, answer.notes = _figures(probe, shown, rows_of)
    if answer.earlier and outcome in ("failed", "skipped"):
        answer.notes.insert(0, f"this run {outcome}: {reason}; the figures are run {answer.run_id}'s")
    if not answer.earlier and len(ok) > 1:
        before = ok.iloc[-2]
        answer.previous_run = str(before["run_id"])
        answer.changes = figs.changes(
            probe,
            _figures(probe, before, rows_of)[0],
            answer.figures,
            str(before["run_id"]),
            before["checkpoint_fp"] != shown["checkpoint_fp"],
        )
    return answer


def _figures(probe: str, job: pd.Series, rows_of: RowsOf) -> tuple[list[dict], list[str]]:
    """The probe's figures from one ok job's stored rows, and its notes (failed checks first)."""
    tables = {table: rows_of(f"{probe}.{table}", job) for table in figs.tables(probe)}
    summary = json.loads(job["summary_json"] or "{}")
    config = json.loads(job["config_json"] or "{}")
    reason = str(job["reason"] or "")
    failed = reason[len(CHECKS_FAILED) :].split(", ") if reason.startswith(CHECKS_FAILED) else []
    rows, notes = figs.extractor(probe)(tables, summary, config)
    for row in rows:
        row["checks"] = "failed: " + ", ".join(failed) if failed else "ok"
    return rows, notes


def _one_row_per_tokenizer(found: list[Answer]) -> list[Answer]:
    """Checkpoints of one host whose padding (bucket) figures are identical tokenize the corpus alike
    (one tokenizer: Qwen3's sizes, the demo's four): one row, naming them all and saying why."""
    groups: dict[tuple, list[Answer]] = {}
    for a in found:
        same = json.dumps(a.figures, sort_keys=True, default=str) if a.figures else a.checkpoint
        groups.setdefault((a.host, a.outcome, a.earlier, same), []).append(a)
    out = []
    for group in groups.values():
        first = group[0]
        if len(group) > 1:
            names = sorted(a.checkpoint for a in group)
            merged = tuple((a.checkpoint, a.config_hash) for a in group)
            first = dataclasses.replace(first, checkpoint=", ".join(names), merged=merged)
            first.notes = [*first.notes, f"one row: the {len(names)} checkpoints share a tokenizer (identical figures)"]
        out.append(first)
    return out


def _section(probe: str, found: list[Answer], host_order: list[str]) -> ProbeAnswers:
    if probes.presentation(probe).one_row_per_tokenizer:  # its answer depends on a checkpoint's tokenizer only
        found = _one_row_per_tokenizer(found)
    present = {a.host for a in found if a.figures}
    hosts = [h for h in host_order if h in present] + sorted(present - set(host_order))
    ratio_of = figs.ratio_of(probe)
    baseline = hosts[0] if len(hosts) >= 2 and ratio_of else None
    found.sort(key=lambda a: (a.checkpoint, hosts.index(a.host) if a.host in hosts else len(hosts), a.host))
    if baseline is not None:
        _add_ratios(found, baseline, ratio_of)
    return ProbeAnswers(
        probe=probe,
        question=figs.question(probe),
        hosts=hosts,
        baseline=baseline if baseline is not None else None,
        ratio_of=ratio_of if baseline is not None else None,
        answers=found,
    )


def _add_ratios(found: list[Answer], baseline: str, metric: str) -> None:
    """Each row's metric over the baseline host's, for the same checkpoint and row identity."""
    base = {
        (a.checkpoint, a.config_hash, figs.row_identity(r)): r.get(metric)
        for a in found
        if a.host == baseline
        for r in a.figures
    }
    for answer in found:
        for row in answer.figures:
            ref = base.get((answer.checkpoint, answer.config_hash, figs.row_identity(row)))
            value = row.get(metric)
            usable = isinstance(value, (int, float)) and isinstance(ref, (int, float)) and ref not in (0, None)
            row[f"ratio_to_{baseline}"] = value / ref if usable else None


def to_json(sections: list[ProbeAnswers]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in sections]


# -- text ---------------------------------------------------------------------------------------
def answers_text(
    store: Store,
    run_id: str,
    *,
    work: Iterable[tuple[str, str, str, str]] | None = None,
    host_order: list[str] | None = None,
) -> str:
    """The end of a sweep: per probe, its answer for each host x checkpoint (see `answers`)."""
    return render_text(answers(store, run_id, work=work, host_order=host_order), run_id)


def render_text(sections: list[ProbeAnswers], run_id: str) -> str:
    return "\n\n".join(_section_text(s, run_id) for s in sections)


def table_rows(section: ProbeAnswers) -> list[dict[str, Any]]:
    """The section as flat rows (checkpoint, host, [measured], figures...): one table for text or HTML."""
    # A column only where this run's values and earlier ones mix; all from one earlier run (a rerun
    # that found everything stored) is said once, in the title.
    earlier = any(a.earlier for a in section.answers if a.figures) and single_earlier_run(section) is None
    out = []
    for answer in section.answers:
        for row in answer.figures:
            line: dict[str, Any] = {"checkpoint": answer.checkpoint, "host": answer.host}
            if earlier:
                line["measured"] = f"earlier: run {answer.run_id}" if answer.earlier else "this run"
            line.update(row)
            out.append(line)
    # Said once rather than per row: checks that all passed (unless the checks are the answer, as mask's are),
    # and a carrier's model where it is the checkpoint itself.
    checks_said = probes.presentation(section.probe).checks_are_answer
    drop = {"checks"} if not checks_said and all(r.get("checks") == "ok" for r in out) else set()
    if all(r.get("model") in (None, r["checkpoint"]) for r in out):
        drop.add("model")
    keep = [
        k for k in dict.fromkeys(k for r in out for k in r) if k not in drop and any(r.get(k) is not None for r in out)
    ]
    return [{k: r.get(k) for k in keep} for r in out]


def single_earlier_run(section: ProbeAnswers) -> str | None:
    """The run every value shown comes from, when all are from one earlier run; else None."""
    shown = [a for a in section.answers if a.figures]
    runs = {a.run_id for a in shown}
    return runs.pop() if shown and all(a.earlier for a in shown) and len(runs) == 1 else None


def section_notes(section: ProbeAnswers) -> list[str]:
    """Notes, changes since the previous run, and work with no ok value at all (with the reason)."""
    lines, unanswered = [], {}
    for a in section.answers:
        where = f"{a.checkpoint} @ {a.host}"
        if not a.figures:  # one line per cause, naming its work: 28 same-cause failures are one line
            what = a.outcome if a.outcome != "stored" else "never done ok"
            unanswered.setdefault((what, a.reason), []).append(where)
            continue
        lines += [f"{where}: {n}" for n in a.notes + a.changes]
    for (what, reason), places in unanswered.items():
        shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
        lines.append(f"{what}: {shown}{': ' + reason if reason else ''}")
    return lines


def _section_text(section: ProbeAnswers, run_id: str) -> str:
    said = [f"ratio_to_{section.baseline}: {section.ratio_of} over {section.baseline}'s"] if section.baseline else []
    if single_earlier_run(section):
        said.append(f"all from run {single_earlier_run(section)}, stored before this run")
    checked = [a for a in section.answers if a.figures]
    checks_said = probes.presentation(section.probe).checks_are_answer
    if not checks_said and checked and all(r.get("checks") == "ok" for a in checked for r in a.figures):
        said.append("every check passed")
    parts = [f"== {section.question}" + (f" ({'; '.join(said)})" if said else "")]
    rows = table_rows(section)
    if rows:
        parts.append(_text_table(rows))
    parts += [f"  {line}" for line in section_notes(section)]
    return "\n".join(parts)


def _text_table(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    cells = [["-" if r[c] is None else _cell(c, r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    right = [
        all(isinstance(r[c], (int, float)) and not isinstance(r[c], bool) for r in rows if r[c] is not None)
        for c in columns
    ]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, right)).rstrip()

    return "\n".join([line(columns)] + [line(row) for row in cells])


def _cell(column: str, value: Any) -> str:
    if column.startswith("ratio_to_") and isinstance(value, float):
        return f"{value:.3f}x"
    if column.endswith("_pct") and isinstance(value, float):
        return format_value(shown_pct(value))
    return format_value(value)
