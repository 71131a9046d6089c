"""cluster.yaml's `budget`: the lab's training budget, the default of every projection of hours.

    budget: {tokens_per_job: 23400000, arms: 3, seeds: 2}

Every plan entry whose probe projects hours (carrier, goodput) gets `token_budget`, `num_arms` and
`num_seeds` from it unless the entry's `config` sets them itself; they enter the job's config hash,
so a changed budget is a changed projection.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

import probes

BUDGET_FIELDS = {"tokens_per_job": "token_budget", "arms": "num_arms", "seeds": "num_seeds"}
"""budget key -> the Config field of every probe that projects hours."""


class BudgetSpec(BaseModel):
    """The lab's training budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tokens_per_job: int = Field(ge=1)
    """Real (non-padding) training tokens a job."""
    arms: int = Field(1, ge=1)
    """Arms of the lab's sweep."""
    seeds: int = Field(1, ge=1)
    """Seeds an arm."""


def with_budget(budget: BudgetSpec | None, probe: str, config: dict[str, Any]) -> dict[str, Any]:
    """A plan entry's config with the budget filled in where the probe projects hours and the entry
    does not set them itself."""
    if budget is None or probe not in probes.REGISTRY:
        return config
    fields = {f.name for f in dataclasses.fields(probes.get(probe).Config)}
    return {**{field: getattr(budget, key) for key, field in BUDGET_FIELDS.items() if field in fields}, **config}
