"""`labprobe compare`: how do the hosts compare on the same work? Checkpoints by hosts, from the store.

    labprobe compare --probe P [--table T] [--metric M] [--baseline HOST] [--json]
                     [--plot FILE] [--store D] [--cluster F]

For each (checkpoint, row group) and host it takes the rows of the newest ok job per
(host, checkpoint, config), the median of the metric over them, and the ratio to the baseline
host. Row groups: rows of one table that differ in a label column (a string, integer or bool
column such as `seq_len` or `strategy`) are compared separately, never averaged together.

Rows of different variants (`variant`, probes.step.variants) are always separate row groups;
`--variant NAME` (repeatable) keeps only those variants' rows, `--host` and `--checkpoint` (repeatable)
only those hosts' and checkpoints' (`labprobe history` takes the same filters).

Hours (`hours_per_job`, `hours_sweep`) are never compared as stored: each job priced its own budget (a
hand default of tokens, its own arms x seeds). With the lab's budget (cluster.yaml's), they are recomputed
from each row's rate as its probe reads it (runner.analysis.rates.budget_hours) and the title names the
budget; without one, compare refuses them.

Warnings (compared numbers that may not be comparable): the hosts' rows carry different checkpoint
fingerprints (not the same checkpoint), different software versions (python, torch, transformers,
peft, CUDA, driver, and the labprobe code each host ran, read on the host), a different harness
(its import path or the sha256 of its source: a harness change, never host drift), or a spread
above 2% (a `*spread*` column, or several values for one cell).

Default metric: each probe's answer, as its presentation declares it (`Presentation.compare`: mask the
layers keeping the fast path, padding the pad fraction per strategy, and so on). `--table summary` compares
any figure of the jobs' summaries (one row per job); `--table jobs` their wall time, the default of a probe
that declares none.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pandas as pd

from probes import ANSWER, SUMMARY, presentation, variant_name
from probes.result import FieldError, InputError
from runner.analysis.compare_answer import answer_rows, text_cells
from runner.analysis.drift import (
    DIMENSIONS,
    SPREAD_LIMIT_PCT,
    above_spread_limit,
    is_spread_column,
    spread_fraction,
    spread_pct,
)
from runner.analysis.rates import HOURS, budget_hours
from runner.hosts.jobenv import VERSION_KEYS
from runner.lab.budget import BudgetSpec
from runner.store.store import KEY_COLUMNS, SLOT, Store
from runner.tables import format_table

METRIC_PREFERENCE = ("step_s", "s_per_step", "tok_per_s", "wall_s", "pad_fraction", "gain")
WARN_VERSIONS = tuple(k for k in VERSION_KEYS if k != "gpu")  # a different GPU is what we compare
NEWER_KEYS = ("code_version", "peft", "harness", "harness_sha256", "harness_optimizer", "harness_autocast_dtype")
"""Environment keys older jobs lack (or CPU probes, for the harness): a missing one is no difference."""


@dataclasses.dataclass
class Comparison:
    probe: str
    table: str
    metric: str
    baseline: str
    hosts: list[str]
    rows: list[dict[str, Any]]
    """{checkpoint, group, values: {host: median}, ratios: {host: value/baseline}, counts: {host: n}}"""
    warnings: list[str]
    gpus: dict[str, str]
    budget: str | None = None
    """What an hours metric prices (the lab's budget, recomputed at read time); None for other metrics."""

    def to_json_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def compare(
    store: Store,
    probe: str,
    *,
    table: str | None = None,
    metric: str | None = None,
    baseline: str | None = None,
    host_order: list[str] | None = None,
    variants: list[str] | None = None,
    hosts: list[str] | None = None,
    checkpoints: list[str] | None = None,
    budget: BudgetSpec | None = None,
) -> Comparison:
    table, metric = _choose(store, probe, table, metric)
    extra = [metric] if table == "jobs" else ["summary_json"] if table == SUMMARY else []
    jobs = _latest_ok_jobs(store, probe, extra=extra)
    if jobs.empty:
        raise InputError(f"{store.root}: no ok jobs of probe {probe!r} stored")
    jobs = only(jobs, hosts=hosts, checkpoints=checkpoints, what=f"the newest ok {probe} jobs")
    rows = (
        jobs
        if table == "jobs"
        else _summary_rows(jobs)
        if table == SUMMARY
        else answer_rows(store, jobs)
        if table == ANSWER
        else _table_rows(store, f"{probe}.{table}", jobs)
    )
    if rows.empty:
        raise InputError(f"{store.root}: no rows of {probe}.{table} from its newest ok jobs")
    rows = of_variants(rows, probe, table, variants)
    rows, priced = _budget_hours(rows, probe, table, metric, budget)
    text = table == ANSWER and metric in rows.columns and not pd.api.types.is_numeric_dtype(rows[metric])
    if metric not in rows.columns or not (text or pd.api.types.is_numeric_dtype(rows[metric])):
        numeric = [c for c in rows.columns if pd.api.types.is_float_dtype(rows[c])]
        raise InputError(f"--metric: no column {metric!r} in {probe}.{table} (numeric: {', '.join(numeric)})")
    hosts = _host_order(rows["host"].unique(), host_order or [])
    baseline = baseline or hosts[0]
    if baseline not in hosts:
        raise InputError(f"--baseline: host {baseline!r} has no rows (hosts: {', '.join(hosts)})")
    dims = _label_columns(rows, metric, text_labels=table == ANSWER)
    cells, differ = text_cells(rows, metric, dims, hosts) if text else (_cells(rows, metric, dims), [])
    warnings = _fingerprint_warnings(rows) + _config_warnings(jobs, dims, hosts) + _version_warnings(jobs)
    warnings += differ if text else _spread_warnings(rows, cells, dims)
    gpus = {h: _env(jobs[jobs["host"] == h]).get("gpu", "") for h in hosts}
    return Comparison(
        probe=probe,
        table=table,
        metric=metric,
        baseline=baseline,
        hosts=hosts,
        rows=_pivot(cells, hosts, baseline),
        warnings=warnings,
        gpus=gpus,
        budget=priced,
    )


def only(frame: pd.DataFrame, *, hosts: list[str] | None, checkpoints: list[str] | None, what: str) -> pd.DataFrame:
    """The rows of these hosts and checkpoints (all when None); a name with no rows is bad input, named."""
    for column, wanted in (("host", hosts), ("checkpoint", checkpoints)):
        if not wanted:
            continue
        known = sorted(frame[column].astype(str).unique())
        missing = [w for w in wanted if w not in known]
        if missing:
            raise InputError(f"--{column} {missing[0]!r}: none in {what} ({column}s: {', '.join(known) or 'none'})")
        frame = frame[frame[column].astype(str).isin(wanted)]
    return frame


def _budget_hours(
    rows: pd.DataFrame, probe: str, table: str, metric: str, budget: BudgetSpec | None
) -> tuple[pd.DataFrame, str | None]:
    """Stored hours priced each job's own budget: an hours metric recomputed for the lab's `budget` (its
    words returned), or refused; any other metric as it is."""
    if metric not in HOURS:
        return rows, None
    if budget is None:
        raise InputError(
            f"--metric {metric}: stored hours price each job's own budget; give a cluster file with a `budget` "
            "(--cluster) to compare hours for the lab's"
        )
    priced = budget_hours(probe, table, rows, budget)
    if priced is None:
        raise InputError(f"--metric {metric}: {probe}.{table} gives no rate to price the lab's budget with")
    return priced, f"{budget.describe()}, recomputed from each row's step time"


JOB_READ_COLUMNS = [
    "run_id",
    "job_id",
    "probe",
    "host",
    "checkpoint",
    "checkpoint_fp",
    "config_hash",
    "finished_at",
    "status",
    "env_json",
]


def _latest_ok_jobs(store: Store, probe: str, extra: list[str] = ()) -> pd.DataFrame:
    """The latest run of each slot (host, checkpoint, config: runner.store.store's SLOT), kept
    when that run is ok. Only the columns needed are read."""
    columns = JOB_READ_COLUMNS + [c for c in extra if c not in JOB_READ_COLUMNS]
    have = store.columns("jobs")
    columns += ["config_json"] if "config_json" in (have or ()) else []  # older stores lack it: no config warning
    missing = [c for c in columns if have and c not in have]
    if missing:
        raise InputError(f"--metric: no column {missing[0]!r} in the jobs table (numeric: wall_s)")
    jobs = store.latest_jobs(probe, by=SLOT, columns=columns)
    return jobs[jobs["status"] == "ok"].reset_index(drop=True) if not jobs.empty else jobs


def _choose(store: Store, probe: str, table: str | None, metric: str | None) -> tuple[str, str]:
    names = set(store.table_names())
    defaults = presentation(probe).compare  # (table, metric) candidates, the probe's answer first
    if table is None:
        for cand_table, cand_metric in defaults:
            if cand_table in (SUMMARY, ANSWER) or f"{probe}.{cand_table}" in names:
                return cand_table, metric or cand_metric
        # A metric of the probe's tables, none stored (its jobs skipped or failed): say that, not "no column"
        if defaults and metric is not None and metric not in store.columns("jobs"):
            wanted = ", ".join(f"{probe}.{t}" for t, _ in defaults if t not in (SUMMARY, ANSWER))
            raise InputError(
                f"{store.root}: no {probe} results stored ({wanted}: none; its jobs were skipped or failed, "
                "e.g. no GPU): run it on a GPU host, or `labprobe demo load-sample` for recorded H200 results"
            )
        return "jobs", metric or "wall_s"
    if table not in ("jobs", SUMMARY, ANSWER) and f"{probe}.{table}" not in names:
        stored = sorted(n.split(".", 1)[1] for n in names if n.startswith(probe + "."))
        raise InputError(f"--table: no table {probe}.{table} stored (stored: {', '.join(stored) or 'none'})")
    if metric is None and table in (SUMMARY, ANSWER):
        raise InputError(f"--metric: name the {table} figure to compare (--table {table})")
    if metric is None:
        cols = ["wall_s"] if table == "jobs" else store.columns(f"{probe}.{table}")
        metric = next((m for m in METRIC_PREFERENCE if m in cols), None) or next(
            (c for c in cols if c.endswith(("_s", "_per_s", "_fraction"))), cols[-1]
        )
    return table, metric


def _table_rows(store: Store, name: str, jobs: pd.DataFrame) -> pd.DataFrame:
    """Rows of the given (newest ok) jobs only: orphans of a crashed write and older runs never enter."""
    return store.read(name, jobs=jobs)


def _summary_rows(jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per job: its key columns and the scalar figures of its summary (not the key's names)."""
    figures = [
        {
            k: v
            for k, v in json.loads(s or "{}").items()
            if isinstance(v, (int, float, str, bool)) and k not in jobs.columns
        }
        for s in jobs["summary_json"]
    ]
    return pd.concat(
        [jobs.drop(columns=["summary_json"]).reset_index(drop=True), pd.DataFrame(figures, index=range(len(jobs)))],
        axis=1,
    )


def of_variants(rows: pd.DataFrame, probe: str, table: str, variants: list[str] | None) -> pd.DataFrame:
    """The rows of the named variants (all when none is named), each under its canonical name: b+a is a+b, and
    a row stored before names were canonical (ce-chunk=0512) is the series of ce-chunk=512, one group, not
    two. An unknown name is bad input."""
    if "variant" not in rows.columns:
        stored: list[str] = []
    else:
        rows = rows.assign(variant=rows["variant"].map(lambda v: _canonical(v) if isinstance(v, str) else v))
        stored = sorted({str(v) for v in rows["variant"].dropna()})
    if not variants:
        return rows
    wanted = {_canonical(v): v for v in variants}
    missing = [v for name, v in wanted.items() if name not in stored]
    if missing:
        raise InputError(
            f"--variant {missing[0]!r}: no such rows in {probe}.{table} "
            f"(stored: {', '.join(stored) or 'none: this table has no variants'})"
        )
    return rows[rows["variant"].map(lambda v: pd.notna(v) and str(v) in wanted)]


def _canonical(name: str) -> str:
    try:
        return variant_name(name)
    except FieldError:  # not a stack's name at all: left as given, for the error naming what is stored
        return name


def _host_order(present, order: list[str]) -> list[str]:
    present = set(present)
    return [h for h in order if h in present] + sorted(present - set(order))


def _label_columns(rows: pd.DataFrame, metric: str, *, text_labels: bool = False) -> list[str]:
    """The fewest label columns (string/int/bool) that tell a job's rows apart, taking only columns
    with the same values on every host (seq_len, strategy), never per-host results (steps taken).
    `text_labels` (an answer's rows): the answer's own columns tell a checkpoint's configs apart where they
    can, before the config hash does."""
    skip = set(KEY_COLUMNS) | {metric, "variant"}
    candidates = [
        c
        for c in rows.columns
        if c not in skip
        and not is_spread_column(c)
        and (
            pd.api.types.is_integer_dtype(rows[c])
            or pd.api.types.is_bool_dtype(rows[c])
            or pd.api.types.is_string_dtype(rows[c])
            or rows[c].dtype == object
        )
    ]
    # Variants are different work: never averaged together, even where hosts measured different sets.
    dims: list[str] = ["variant"] if "variant" in rows.columns and rows["variant"].notna().any() else []
    for col in candidates:
        if not rows.duplicated(["job_id", *dims]).any():
            break
        # a shape (seq_len...) always tells rows apart, aligned or not: one host's missing length must not pool
        # the other's lengths into one median; another label only where every host shows the same values
        if rows.groupby("job_id")[col].nunique().max() > 1 and (col in DIMENSIONS or _aligned(rows, col)):
            dims.append(col)
    if text_labels:  # an answer's rows name their config (mask: seq_len, padding, use_cache): say it so
        for col in candidates:
            if rows.groupby(["host", "checkpoint", *dims], dropna=False)["config_hash"].nunique().max() < 2:
                break
            if col not in dims and rows.groupby(["host", "checkpoint"])[col].nunique(dropna=False).max() > 1:
                dims.append(col)
    if rows.groupby(["host", "checkpoint", *dims], dropna=False)["config_hash"].nunique().max() > 1:
        dims.append("config_hash")
    return dims


def _aligned(rows: pd.DataFrame, col: str) -> bool:
    """Every host shows the same set of values of `col` for a checkpoint."""
    for _, part in rows.groupby("checkpoint"):
        sets = {frozenset(map(str, v)) for _, v in part.groupby("host")[col]}
        if len(sets) > 1:
            return False
    return True


def _cells(rows: pd.DataFrame, metric: str, dims: list[str]) -> pd.DataFrame:
    """One row per (checkpoint, dims..., host): median, min, max, n of the metric, the spread of its
    values (percent), and whether it is untrusted (several values spread above the limit, or a
    row's own spread column above it: runner.analysis.drift's rule)."""
    keys = ["checkpoint", *dims, "host"]
    rows = rows.assign(_spread_pct=_row_spread_pct(rows))
    grouped = rows.groupby(keys, sort=False, dropna=False)
    cells = grouped[metric].agg(["median", "min", "max", "count"])
    cells["row_spread_pct"] = grouped["_spread_pct"].max()
    cells = cells.reset_index().sort_values(["checkpoint", *dims], kind="stable")
    cells["group"] = (
        [" ".join(f"{d}={v}" for d, v in zip(dims, vals)) for vals in cells[dims].itertuples(index=False)]
        if dims
        else ""
    )
    # NaN where the median is 0 or a single value: no spread of values to judge.
    cells["spread_pct"] = (cells["max"] - cells["min"]) / cells["median"].abs().where(cells["median"] != 0) * 100.0
    cells["untrusted"] = ((cells["count"] > 1) & above_spread_limit(cells["spread_pct"])) | above_spread_limit(
        cells["row_spread_pct"]
    )
    return cells


def _spread_columns(rows: pd.DataFrame) -> list[str]:
    return [c for c in rows.columns if is_spread_column(c) and pd.api.types.is_numeric_dtype(rows[c])]


def _row_spread_pct(rows: pd.DataFrame) -> pd.Series:
    """Each row's largest own spread, in percent, over its spread columns (a missing one reads 0)."""
    spread = pd.Series(0.0, index=rows.index)
    for col in _spread_columns(rows):
        spread = spread.combine(spread_pct(rows[col].fillna(0.0), col), max)
    return spread


def _pivot(cells: pd.DataFrame, hosts: list[str], baseline: str) -> list[dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for cell in cells[["checkpoint", "group", "host", "median", "count", "untrusted"]].itertuples(index=False):
        row = out.setdefault(
            (cell.checkpoint, cell.group),
            {
                "checkpoint": cell.checkpoint,
                "group": cell.group,
                "values": {},
                "ratios": {},
                "counts": {},
                "untrusted": {},
            },
        )
        row["values"][cell.host] = cell.median if isinstance(cell.median, str) else float(cell.median)
        row["counts"][cell.host] = int(cell.count)
        row["untrusted"][cell.host] = bool(cell.untrusted)
    for row in out.values():
        base = row["values"].get(baseline)
        numeric = not isinstance(base, str) and base not in (None, 0)
        row["ratios"] = {h: (v / base if numeric else None) for h, v in row["values"].items()}
    return list(out.values())


def _fingerprint_warnings(rows: pd.DataFrame) -> list[str]:
    out = []
    fps = rows.groupby("checkpoint")[["host", "checkpoint_fp"]].apply(lambda p: p.drop_duplicates())
    for ckpt, part in fps.groupby(level=0):
        if part["checkpoint_fp"].nunique() > 1:
            seen = ", ".join(f"{h} {fp}" for h, fp in zip(part["host"], part["checkpoint_fp"]))
            out.append(f"checkpoint {ckpt}: fingerprints differ across hosts ({seen}): not the same checkpoint")
    return out


BUDGET_CONFIG = ("token_budget", "num_arms", "num_seeds")
"""Config fields that change only the hours a job stored, not what it measured."""


def _config_warnings(jobs: pd.DataFrame, dims: list[str], hosts: list[str]) -> list[str]:
    """A checkpoint whose hosts ran different probe configs: the fields that differ, named, since a ratio of
    another seq_len or harness is no host's difference (steps or processes only change the effort). The
    budget's fields change only stored hours, which compare recomputes for one budget: never warned."""
    if "config_json" not in jobs or "config_hash" in dims:
        return []
    out = []
    for ckpt, part in jobs.groupby("checkpoint"):
        if part["config_hash"].nunique() < 2:
            continue
        found = {h: json.loads(c or "{}") for h, c in zip(part["host"], part["config_json"])}
        configs = {h: found[h] for h in hosts if h in found}  # in the comparison's host order
        keys = sorted({k for c in configs.values() for k in c})
        differ = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs.values()}) > 1]
        differ = [k for k in differ if k not in BUDGET_CONFIG]  # hours are recomputed for one budget or not shown
        if not differ:
            continue
        shown = "; ".join(f"{k}: " + ", ".join(f"{h} {configs[h].get(k)}" for h in configs) for k in differ[:4])
        out.append(f"checkpoint {ckpt}: hosts ran different configs ({shown}): not the same work where these change it")
    return out


def _env(jobs: pd.DataFrame) -> dict[str, str]:
    return json.loads(jobs["env_json"].iloc[-1]) if len(jobs) else {}


def _version_warnings(jobs: pd.DataFrame) -> list[str]:
    envs = {h: [json.loads(e) for e in part["env_json"]] for h, part in jobs.groupby("host")}
    out = []
    for key in WARN_VERSIONS:
        seen = {h: sorted({e.get(key, "") for e in es}) for h, es in envs.items()}
        if key in NEWER_KEYS:  # unknown in jobs stored before hosts recorded it: no evidence either way
            seen = {h: [v for v in vals if v] for h, vals in seen.items()}
        if len({v for vals in seen.values() for v in vals}) > 1:
            shown = ", ".join(f"{h} {'/'.join(v) or '-'}" for h, v in seen.items())
            what = {
                "code_version": "labprobe code versions",
                "harness_sha256": "harness sources (a harness change, not host drift)",
            }.get(key, f"{key} versions")
            out.append(f"{what} differ: {shown}")
    return out


def _spread_warnings(rows: pd.DataFrame, cells: pd.DataFrame, dims: list[str]) -> list[str]:
    out = []
    high_values = cells[(cells["count"] > 1) & above_spread_limit(cells["spread_pct"])]
    for cell in high_values.itertuples(index=False):
        out.append(
            f"{cell.checkpoint} {cell.group} @ {cell.host}: {cell.count} values spread {cell.spread_pct:.1f}%".replace(
                "  ", " "
            )
        )
    for col in _spread_columns(rows):
        high = rows[above_spread_limit(spread_pct(rows[col], col))]
        for (ckpt, host), part in high.groupby(["checkpoint", "host"]):
            out.append(
                f"{ckpt} @ {host}: {col} up to {spread_fraction(part[col], col).max():.1%} "
                f"(> {SPREAD_LIMIT_PCT:.0f}%): not yet a number"
            )
    return out


_HIGHER = ("per_s", "mfu", "gain_vs_random", "gpu_busy_frac", "entropy_ratio", "sources_per_batch")
_LOWER = ("_s", "_bytes", "_pct", "pad_fraction", "hours", "_tokens", "_samples")


def better(metric: str) -> str:
    """'lower is better', 'higher is better', or '' where the unit does not say (a count, a size)."""
    if metric.endswith(_HIGHER):
        return "higher is better"
    if metric.endswith(_LOWER) or metric.startswith("hours"):
        return "lower is better"
    return ""


def render(result: Comparison) -> str:
    direction = better(result.metric)
    notes = ([f"ratio to {result.baseline}"] if len(result.hosts) > 1 else []) + ([direction] if direction else [])
    title = f"== {result.probe}: {result.table}.{result.metric} by host" + (f" ({'; '.join(notes)})" if notes else "")
    if result.budget:
        title += f"\n   hours for the lab's budget: {result.budget}"
    table = []
    for row in result.rows:
        line: dict[str, Any] = {"checkpoint": row["checkpoint"]}
        if any(r["group"] for r in result.rows):
            line["group"] = row["group"]
        for host in result.hosts:
            line[host] = row["values"].get(host)
            if host != result.baseline:
                ratio = row["ratios"].get(host)
                line[f"{host}/{result.baseline}"] = None if ratio is None else f"{ratio:.3f}x"
        table.append(line)
    parts = [format_table(table, title=title)]
    gpus = ", ".join(f"{h}: {g}" for h, g in result.gpus.items() if g)
    if gpus:
        parts.append(f"GPUs: {gpus}")
    parts += [f"warning: {w}" for w in result.warnings]
    return "\n".join(parts)
