"""What another probe reads of a carrier result, typed: each model's measured step per variant and its
numerics verdict, as a MeasuredRun (goodput and replay scale a step-time model by a stack's factor from it).

A result is a `labprobe probe carrier --json` output, or the store's newest ok carrier in the same shape
(runner.analysis.stored_profile). The names of the tables and columns read here are carrier's own (its
CarrierRow and the numerics rows it writes): this module is the one place outside probes/carrier/ that knows
them (tests/probes/test_contracts.py checks that no other probe module reads them, and that what carrier writes
reads back here).
"""

from __future__ import annotations

from probes.result import InputError, table_rows
from probes.step.steptime.model import card_of, setup_of
from probes.step.steptime.stack_step import MeasuredRun, MeasuredStep

CARRIERS = "carriers"
"""A row per model and variant (probes.carrier.probe.CarrierRow)."""
NUMERICS = "numerics"
"""A row per model and variant compared with its baseline (probes.step.variants.numerics.NumericsRow)."""
TABLES = (CARRIERS, NUMERICS)
"""The tables a MeasuredRun is read from (the registry's stored input of goodput names these)."""
STACKS_FROM = "table 'carriers' of carrier --json"


def _step(row: dict) -> MeasuredStep:
    return MeasuredStep(
        model=str(row.get("model")),
        variant=str(row.get("variant")),
        status=str(row.get("status", "ok")),
        step_s=row.get("step_s"),
        mean_step_s=row.get("mean_step_s"),
        tokens_per_step=row.get("tokens_per_step"),
        trustworthy=row.get("trustworthy"),
        launch_bound=row.get("launch_bound"),
    )


def _verdicts(tables: dict, source: str) -> dict[str, dict[str, bool | None]]:
    """model -> variant -> its `within_tolerance` in the `numerics` table (the first row of each pair)."""
    out: dict[str, dict[str, bool | None]] = {}
    for r in table_rows(tables, NUMERICS, source):
        within = r.get("within_tolerance")
        if within not in (None, True, False):
            raise InputError(
                f"{source}: table {NUMERICS!r}: {r.get('variant')}'s within_tolerance is {within!r}, "
                "not true, false or null"
            )
        out.setdefault(str(r.get("model")), {}).setdefault(str(r.get("variant")), within)
    return out


def measured_run(result: dict, source: str) -> MeasuredRun | None:
    """Every model's measured steps and numerics verdicts; None where the result has no `carriers` rows."""
    tables = result.get("tables") if isinstance(result, dict) else None
    if not isinstance(tables, dict) or not tables.get(CARRIERS):
        return None
    steps = tuple(_step(r) for r in table_rows(tables, CARRIERS, source))
    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    batch, seq = (v if type(v) is int else None for v in (config.get("batch_size"), config.get("seq_len")))
    return MeasuredRun(
        steps=steps,
        verdicts=_verdicts(tables, source),
        batch_size=batch,
        seq_len=seq,
        rows=config.get("rows", "full"),
        setup=setup_of(config) | card_of(result),
        source=source,
    )
