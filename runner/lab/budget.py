"""cluster.yaml's `budget`: the lab's training budget, the default of every projection of hours.

    budget: {tokens_per_job: 23400000, arms: 3, seeds: 2}
    budget: {tokens_per_job: 23400000, arms: [qwen3-0.6b-base, qwen3-1.7b-base, qwen3-4b-base], seeds: 2}

`arms` is a count (every arm trains the carrier being priced) or the checkpoints the arms train, one
arm each (the carrier ruling's: three models at two seeds). Every plan entry whose probe projects
hours (carrier, goodput) gets `token_budget`, `num_arms` and `num_seeds` from it unless the entry's
`config` sets them itself; they enter the job's config hash, so a changed budget is a changed
projection. `labprobe recommend` prices every stored rate with it at read time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

import probes

BUDGET_FIELDS = {"tokens_per_job": "token_budget", "num_arms": "num_arms", "seeds": "num_seeds"}
"""budget attribute -> the Config field of every probe that projects hours."""


class BudgetSpec(BaseModel):
    """The lab's training budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tokens_per_job: int = Field(ge=1)
    """Real (non-padding) training tokens a job."""
    arms: int | list[str] = Field(1)
    """Arms of the lab's sweep: a count, or the checkpoints they train (one arm each)."""
    seeds: int = Field(1, ge=1)
    """Seeds an arm."""

    @field_validator("arms")
    @classmethod
    def _arms(cls, value: int | list[str]) -> int | list[str]:
        if isinstance(value, list) and (not value or len(set(value)) != len(value)):
            raise ValueError("a list of arms names each checkpoint once, and at least one")
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be >= 1, got {value}")
        return value

    @property
    def num_arms(self) -> int:
        return self.arms if isinstance(self.arms, int) else len(self.arms)

    @property
    def arm_checkpoints(self) -> list[str]:
        """The checkpoints the arms train, when the budget names them; [] for a count."""
        return [] if isinstance(self.arms, int) else list(self.arms)

    @property
    def jobs(self) -> int:
        """Jobs of the sweep: arms x seeds."""
        return self.num_arms * self.seeds

    def describe(self) -> str:
        """`23.4M tokens a job x 3 arms x 2 seeds`, the arms named where the budget names them."""
        arms = f"{self.num_arms} arm{'s' * (self.num_arms != 1)}"
        arms += f" ({', '.join(self.arm_checkpoints)})" if self.arm_checkpoints else ""
        return f"{self.tokens_per_job / 1e6:.4g}M tokens a job x {arms} x {self.seeds} seed{'s' * (self.seeds != 1)}"


def with_budget(budget: BudgetSpec | None, probe: str, config: dict[str, Any]) -> dict[str, Any]:
    """A plan entry's config with the budget filled in where the probe projects hours and the entry
    does not set them itself."""
    if budget is None or probe not in probes.REGISTRY:
        return config
    fields = {f.name for f in dataclasses.fields(probes.config_class(probe))}
    return {**{field: getattr(budget, key) for key, field in BUDGET_FIELDS.items() if field in fields}, **config}
