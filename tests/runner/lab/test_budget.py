"""cluster.yaml's budget: the default of every projection of hours, overridable per plan entry."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from probes.result import InputError
from runner.lab.cluster import load_cluster
from runner.lab.plan import expand

REPO = Path(__file__).resolve().parents[3]


def cluster_file(tmp_path: Path, budget, entries: list[dict]) -> Path:
    data = {
        "hosts": [{"name": "a", "address": "a", "checkpoints_root": str(REPO / "demo" / "checkpoints")}],
        "checkpoints": [{"name": "qwen3-0.6b-base", "path": "qwen3-0.6b-base"}],
        "corpora": [{"name": "demo", "path": str(REPO / "demo" / "corpus.jsonl")}],
        "plans": {"p": entries},
    }
    if budget is not None:
        data["budget"] = budget
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


GOODPUT = {"probe": "goodput", "corpus": "demo", "config": {"quadratic_s": 0.0, "linear_s": 1e-4, "fixed_s": 0.1}}


def test_the_budget_fills_every_projection_an_entry_does_not_set(tmp_path):
    budget = {"tokens_per_job": 23_400_000, "arms": 3, "seeds": 2}
    own = {"probe": "carrier", "config": {"token_budget": 1000, "steps": 0}}
    jobs = expand(
        load_cluster(
            cluster_file(
                tmp_path, budget, [GOODPUT, {"probe": "carrier", "config": {"steps": 0}}, own, {"probe": "mask"}]
            )
        ),
        "p",
    )
    configs = [j.probe_config() for j in jobs]
    for config in configs[:2]:  # goodput and carrier: the lab's budget
        assert (config.token_budget, config.num_arms, config.num_seeds) == (23_400_000, 3, 2)
    assert (configs[2].token_budget, configs[2].num_arms) == (1000, 3)  # the entry's own value wins
    assert not hasattr(configs[3], "token_budget")
    # a changed budget is a changed projection: new config hashes, so the jobs run again
    other = expand(load_cluster(cluster_file(tmp_path, {**budget, "seeds": 3}, [GOODPUT])), "p")
    assert other[0].config_hash != jobs[0].config_hash


def test_without_a_budget_the_probes_defaults_stand(tmp_path):
    (job,) = expand(load_cluster(cluster_file(tmp_path, None, [GOODPUT])), "p")
    config = job.probe_config()
    assert (config.token_budget, config.num_arms, config.num_seeds) == (None, 1, 1)


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ({"tokens_per_job": 0}, "budget.tokens_per_job: Input should be greater than or equal to 1"),
        ({"arms": 2}, "budget.tokens_per_job: required key is missing"),
        ({"tokens_per_job": 10, "seed": 2}, "budget: unknown key 'seed'"),
        ({"tokens_per_job": 10, "arms": ["qwen9"]}, "budget.arms[0]: unknown checkpoint 'qwen9'"),
        ({"tokens_per_job": 10, "arms": ["qwen3-0.6b-base"] * 2}, "names each checkpoint once"),
        ({"tokens_per_job": 10, "arms": 0}, "budget.arms"),
    ],
)
def test_a_bad_budget_is_one_line_naming_the_key(tmp_path, budget, message):
    with pytest.raises(InputError) as exc:
        load_cluster(cluster_file(tmp_path, budget, [GOODPUT]))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_the_shipped_cluster_yaml_carries_the_rulings_budget():
    budget = load_cluster(REPO / "cluster.yaml").spec.budget
    assert (budget.tokens_per_job, budget.arms, budget.seeds) == (23_400_000, 3, 2)


def test_arms_named_by_checkpoint_count_as_that_many_arms(tmp_path):
    """The ruling's budget: its three models are its three arms; every projection gets num_arms 3."""
    budget = {"tokens_per_job": 23_400_000, "arms": ["qwen3-0.6b-base"], "seeds": 2}
    (job,) = expand(load_cluster(cluster_file(tmp_path, budget, [GOODPUT])), "p")
    assert job.probe_config().num_arms == 1
    spec = load_cluster(cluster_file(tmp_path, budget, [GOODPUT])).spec.budget
    assert spec.arm_checkpoints == ["qwen3-0.6b-base"] and spec.jobs == 2
    assert spec.describe() == "23.4M tokens a job x 1 arm (qwen3-0.6b-base) x 2 seeds"
