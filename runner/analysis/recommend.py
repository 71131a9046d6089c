"""`labprobe recommend`: the lab's question from the store: which carrier, on which host, how many hours for
the lab's budget (cluster.yaml's `budget`: tokens a job x arms x seeds), with which stack.

For each host x carrier with a rate stored (runner.analysis.rates), the hours are priced at read time from
the rates, never from hours a row stored (those price their own job's budget):
- the batching: the best rate on the lab's corpus (goodput's priced strategies, a replay's measured ones),
  one-off seconds a job included; without one, the best step rate measured (full rows, no padding: a lower
  bound on the hours), said so, and a line of what would price it;
- the stack: every stack a job measured beside its baseline at one shape scales the corpus rate by its step
  over that baseline's (as goodput prices a stack); the best stack within the numerics tolerance is the
  figure (the baseline, the harness as it is, always is), and the fastest one outside it (or not measured)
  is shown beside it, marked, when it is faster.
Each figure names what it stands on (probe, run, date, spread, replayed or not). What is missing is a line
each: plans that would measure it (`labprobe sweep --plan P`), or what the probe that measures it says.
The verdict, one line, names the carrier, the host, the hours for the budget and the stack: the fewest
hours among trustworthy figures; where the budget names its arms' checkpoints, the host where the whole
sweep takes the fewest.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from probes.rate import BASELINE, CORPUS, STEP, Rate
from probes.result import InputError
from runner.analysis.rates import Evidence
from runner.lab.budget import BudgetSpec


@dataclasses.dataclass
class Price:
    """One way to train a carrier on a host: a stack, a batching, the hours, and what they stand on."""

    stack: str
    within_tolerance: bool | None
    real_tok_per_s: float
    hours_per_job: float
    hours_budget: float
    batching: str
    trustworthy: bool | None
    spread_pct: float | None
    replayed: str | None
    """How a replay of this batching and stack measured against the price; None: not replayed."""
    evidence: list[dict[str, Any]]
    notes: list[str]

    @property
    def pick(self) -> str:
        return {True: "within tolerance", False: "OUTSIDE tolerance", None: "numerics unknown"}[self.within_tolerance]


@dataclasses.dataclass
class Priced:
    host: str
    carrier: str
    best: Price | None
    """The fastest price within the numerics tolerance (trustworthy ones first)."""
    faster_outside: Price | None
    """The fastest outside the tolerance or with no numerics verdict, when faster than `best`."""
    unverified: list[str]
    """Stacks faster than `best` without a numerics verdict (what to measure next)."""


def price_all(evidence: list[Evidence], budget: BudgetSpec) -> list[Priced]:
    """Per host x carrier (in the order first seen), its best price within tolerance and the faster one outside."""
    groups: dict[tuple[str, str], list[Evidence]] = {}
    for e in evidence:
        groups.setdefault((e.host, e.carrier), []).append(e)
    out = []
    for (host, carrier), found in sorted(groups.items()):
        options = _options(found, budget)
        within = [o for o in options if o.within_tolerance is True]
        best = max(within, key=_preference) if within else None
        faster = [
            o
            for o in options
            if o.within_tolerance is not True and (best is None or o.hours_budget < best.hours_budget)
        ]
        unverified = sorted({o.stack for o in faster if o.within_tolerance is None})
        out.append(Priced(host, carrier, best, max(faster, key=_preference) if faster else None, unverified))
    return out


def _preference(price: Price) -> tuple[bool, float]:
    """Trustworthy (or not known otherwise) first, then the fewest hours."""
    return price.trustworthy is not False, -price.hours_budget


def _options(found: list[Evidence], budget: BudgetSpec) -> list[Price]:
    steps = [e for e in found if e.rate.basis == STEP]
    corpus = [e for e in found if e.rate.basis == CORPUS]
    predicted = [e for e in corpus if not e.rate.replayed] or corpus  # a whole job's price before a sample's
    options = []
    if predicted:
        base = [e for e in predicted if e.rate.stack == BASELINE]
        if base:
            best = min(base, key=lambda e: _job_hours(e.rate.real_tok_per_s, e.rate.once_s, budget))
            options.append(_price(budget, [best], best.rate.real_tok_per_s, best.rate.stack))
            for base_step, stack_step in _stack_pairs(steps):
                tok_per_s = best.rate.real_tok_per_s * stack_step.rate.real_tok_per_s / base_step.rate.real_tok_per_s
                options.append(_price(budget, [best, base_step, stack_step], tok_per_s, stack_step.rate.stack))
        options += [
            _price(budget, [e], e.rate.real_tok_per_s, e.rate.stack) for e in predicted if e.rate.stack != BASELINE
        ]
    else:
        options = [_price(budget, [e], e.rate.real_tok_per_s, e.rate.stack) for e in steps]
    for option in options:
        option.replayed = _replayed(option, corpus)
    return options


def _stack_pairs(steps: list[Evidence]) -> list[tuple[Evidence, Evidence]]:
    """(baseline, stack) of every stack a job measured beside its baseline at the same shape."""
    pairs = []
    for e in steps:
        if e.rate.stack == BASELINE:
            continue
        base = [
            b
            for b in steps
            if b.rate.stack == BASELINE and (b.job_id, b.run_id, b.rate.shape) == (e.job_id, e.run_id, e.rate.shape)
        ]
        if base:
            pairs.append((base[0], e))
    return pairs


def _job_hours(tok_per_s: float, once_s: float, budget: BudgetSpec) -> float:
    return (budget.tokens_per_job / tok_per_s + once_s) / 3600.0


def _price(budget: BudgetSpec, uses: list[Evidence], tok_per_s: float, stack: str) -> Price:
    """The price of `stack` at `tok_per_s`, standing on `uses` (the corpus rate first, where there is one)."""
    lead, last = uses[0].rate, uses[-1].rate
    once_s = lead.once_s if lead.basis == CORPUS else 0.0
    per_job = _job_hours(tok_per_s, once_s, budget)
    trusts = [e.rate.trustworthy for e in uses]
    steps = [e for e in uses if e.rate.basis == STEP]
    spreads = [e.rate.spread_pct for e in uses if e.rate.spread_pct is not None]
    if lead.basis == CORPUS:
        batching = f"{lead.shape} on {lead.corpus or 'a corpus'}" + (" (replayed)" if lead.replayed else "")
    else:
        batching = f"not priced on the lab's corpus: {lead.shape}, no padding"
    return Price(
        stack=stack,
        within_tolerance=last.within_tolerance if stack != BASELINE else True,
        real_tok_per_s=tok_per_s,
        hours_per_job=per_job,
        hours_budget=per_job * budget.jobs,
        batching=batching,
        trustworthy=False if False in trusts else (True if steps and all(e.rate.trustworthy for e in steps) else None),
        spread_pct=max(spreads) if spreads else None,
        replayed=None,
        evidence=[_cite(e) for e in uses],
        notes=[f"{e.rate.stack}: {e.rate.note}" for e in uses if e.rate.note and e.rate.trustworthy is False],
    )


def _cite(e: Evidence) -> dict[str, Any]:
    r = e.rate
    what = f"{r.stack} at {r.shape}" + (f" on {r.corpus}" if r.corpus else "")
    return {
        "probe": e.probe,
        "run_id": e.run_id,
        "job_id": e.job_id,
        "finished_at": e.finished_at,
        "what": what,
        "real_tok_per_s": r.real_tok_per_s,
        "spread_pct": r.spread_pct,
        "trustworthy": r.trustworthy,
        "replayed": r.replayed,
    }


def _replayed(option: Price, corpus: list[Evidence]) -> str | None:
    """A replay of the same batching and stack on this host and carrier, against what it predicted."""
    lead = option.evidence[0]
    for e in corpus:
        if not e.rate.replayed or e.rate.stack != option.stack or e.rate.shape not in lead["what"]:
            continue
        if e.rate.predicted_tok_per_s:
            error = 100 * (e.rate.predicted_tok_per_s - e.rate.real_tok_per_s) / e.rate.real_tok_per_s
            return f"{e.rate.note}: predicted {error:+.1f}% of measured ({e.cite()})"
        return f"{e.rate.note} ({e.cite()})"
    return None


def within_spread(a: Price, b: Price) -> bool:
    """Two figures that differ by no more than the larger of their spreads: the same within the noise."""
    spread = max(a.spread_pct or 0.0, b.spread_pct or 0.0)
    return 100 * abs(a.hours_budget - b.hours_budget) / min(a.hours_budget, b.hours_budget) <= spread


def describe_rate(rate: Rate) -> str:
    return f"{rate.real_tok_per_s:,.0f} real tok/s ({rate.stack}, {rate.shape})"


@dataclasses.dataclass
class Recommendation:
    budget: dict[str, Any]
    """tokens_per_job, arms, seeds, jobs and the budget in words (`describe`)."""
    priced: list[Priced]
    sweeps: list[dict[str, Any]]
    """Where the budget names its arms' checkpoints: per host that priced them all, the whole sweep."""
    missing: list[str]
    verdict: str | None

    def to_json_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def recommend(
    evidence: list[Evidence],
    budget: BudgetSpec,
    *,
    planned_missing: list[str] = (),
    hints: dict[str, tuple[str, str]] | None = None,
) -> Recommendation:
    """The answer from the rates gathered (runner.analysis.rates.gather). `planned_missing`: lines of work a
    plan would measure and the store lacks; `hints`: probe -> (its rate basis, what measures it)."""
    priced = price_all(evidence, budget)
    sweeps = _sweeps(priced, budget)
    lines = list(planned_missing) + _gaps(priced, evidence, hints or {})
    return Recommendation(
        budget={
            "tokens_per_job": budget.tokens_per_job,
            "arms": budget.arms,
            "seeds": budget.seeds,
            "jobs": budget.jobs,
            "describe": budget.describe(),
        },
        priced=priced,
        sweeps=sweeps,
        missing=list(dict.fromkeys(lines)),
        verdict=_sweep_verdict(sweeps, budget) if budget.arm_checkpoints else _verdict(priced, budget),
    )


def _sweeps(priced: list[Priced], budget: BudgetSpec) -> list[dict[str, Any]]:
    """Per host, the budget's named arms each priced with its best within tolerance: seeds x their job hours."""
    out = []
    for host in dict.fromkeys(p.host for p in priced):
        arms = {p.carrier: p.best for p in priced if p.host == host and p.best is not None}
        if not budget.arm_checkpoints or any(a not in arms for a in budget.arm_checkpoints):
            continue
        chosen = [arms[a] for a in budget.arm_checkpoints]
        out.append(
            {
                "host": host,
                "hours": budget.seeds * sum(p.hours_per_job for p in chosen),
                "hours_per_job": {a: arms[a].hours_per_job for a in budget.arm_checkpoints},
                "stacks": {a: arms[a].stack for a in budget.arm_checkpoints},
                "trustworthy": all(p.trustworthy is not False for p in chosen),
            }
        )
    return out


def hours_text(hours: float) -> str:
    return f"{hours:.1f} h" if hours >= 10 else f"{hours:.2f} h"


def _verdict(priced: list[Priced], budget: BudgetSpec) -> str | None:
    found = [p for p in priced if p.best is not None and p.best.trustworthy is not False]
    if not found:
        return None
    win = min(found, key=lambda p: p.best.hours_budget)
    best = win.best
    stack = "baseline (the harness as it is)" if best.stack == BASELINE else f"{best.stack} (numerics within tolerance)"
    ties = [p.host for p in found if p.carrier == win.carrier and p is not win and within_spread(p.best, best)]
    tie = f"; {', '.join(ties)} the same within the spread" if ties else ""
    return (
        f"verdict: {win.carrier} on {win.host}: {hours_text(best.hours_budget)} for the budget "
        f"({budget.describe()}), stack {stack}, {best.batching}{tie}"
    )


def _sweep_verdict(sweeps: list[dict[str, Any]], budget: BudgetSpec) -> str | None:
    found = [s for s in sweeps if s["trustworthy"]]
    if not found:
        return None
    win = min(found, key=lambda s: s["hours"])
    stacks = set(win["stacks"].values())
    stack = (
        f"stack {stacks.pop()}"
        if len(stacks) == 1
        else "stacks " + ", ".join(f"{a} {s}" for a, s in win["stacks"].items())
    )
    voices = " + ".join(f"{a} {hours_text(h)}" for a, h in win["hours_per_job"].items())
    return (
        f"verdict: {', '.join(budget.arm_checkpoints)} (the budget's arms) on {win['host']}: "
        f"{hours_text(win['hours'])} for the budget ({budget.describe()}: {budget.seeds} x ({voices})), {stack}"
    )


def _unpriced_batching(priced: list[Priced], evidence: list[Evidence], hints: dict[str, tuple[str, str]]) -> list[str]:
    """A line per host whose carriers' batching no rate on a corpus prices, with what would price it."""
    hint = next((hint for basis, hint in hints.values() if basis == CORPUS), None)
    on_corpus = {(e.host, e.carrier) for e in evidence if e.rate.basis == CORPUS}
    unpriced: dict[str, list[str]] = {}
    for p in priced:
        if (p.host, p.carrier) not in on_corpus:
            unpriced.setdefault(p.host, []).append(p.carrier)
    if hint is None:
        return []
    return [
        f"{host}: batching not priced on the lab's corpus for {', '.join(carriers)} (their hours assume full rows, "
        f"no padding): {hint.format(host=host, checkpoint=carriers[0] if len(carriers) == 1 else 'NAME')}"
        for host, carriers in unpriced.items()
    ]


def _gaps(priced: list[Priced], evidence: list[Evidence], hints: dict[str, tuple[str, str]]) -> list[str]:
    """What would make each figure better founded: a batching priced on the lab's corpus, numerics of the faster
    stacks, a trustworthy step."""
    lines = _unpriced_batching(priced, evidence, hints)
    for p in priced:
        where = dict(host=p.host, checkpoint=p.carrier)
        if p.unverified and p.faster_outside is not None:
            probe = p.faster_outside.evidence[-1]["probe"]
            hint = hints.get(probe, ("", ""))[1]
            lines.append(
                f"{p.carrier} on {p.host}: faster stacks without a numerics verdict ({', '.join(p.unverified)})"
                + (f": {hint.format(**where)}" if hint else "")
            )
        if p.best is not None and p.best.trustworthy is False:
            why = "; ".join(p.best.notes) or "launch-bound or spread above 2%"
            lines.append(f"{p.carrier} on {p.host}: its figure is not trustworthy ({why}): not in the verdict")
    return lines


def from_store(store, cluster, *, hosts: set[str] | None = None, checkpoints: set[str] | None = None) -> Recommendation:
    """The recommendation for `cluster`'s budget from what `store` holds (of these hosts and checkpoints)."""
    from runner.analysis import rates

    if cluster.spec.budget is None:
        raise InputError(f"{cluster.path}: no `budget` (tokens_per_job, arms, seeds): nothing to price hours for")
    stored = rates.stored_work(store)
    for option, asked, known in (
        ("--host", hosts, set(cluster.hosts) | {w[1] for w in stored}),
        ("--checkpoint", checkpoints, set(cluster.checkpoints) | {w[2] for w in stored}),
    ):
        unknown = sorted((asked or set()) - known)
        if unknown:
            raise InputError(f"{option} {unknown[0]!r}: not in {cluster.path.name} and no rate stored of it")
    evidence = rates.gather(store, hosts=hosts, checkpoints=checkpoints)
    missing = rates.planned_missing(cluster, stored, hosts=hosts, checkpoints=checkpoints)
    return recommend(evidence, cluster.spec.budget, planned_missing=missing, hints=rates.hints())
