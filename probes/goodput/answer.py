"""The `goodput` probe's answer: how many hours will the run take, priced with which batching and which
stack? Read from its summary (the best strategy's hours, and without the stack when one priced them);
runner.analysis shows it."""

from __future__ import annotations

QUESTION = "goodput: how many hours will the run take, with the best batching (and stack)?"
TABLES = ()
EXACT = False
RATIO_OF = None
FIGURES = (
    "priced_with",
    "best_hours_per_job",
    "best_hours_sweep",
    "best_goodput_tok_per_s",
    "stack_step_factor",
    "baseline_hours_per_job",
    "step_model",
)


def figures(tables: dict, summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    return [{k: summary[k] for k in FIGURES if summary.get(k) is not None}], []
