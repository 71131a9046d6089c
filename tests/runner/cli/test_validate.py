"""`labprobe validate`: the repo's cluster file expands with the job counts computed by hand; a broken
file lists every problem by key path, one line each, exit 2; nothing runs (no Ray, no store)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from runner import cli

REPO = Path(__file__).resolve().parents[3]


def test_repo_cluster_file_expands_every_plan(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    lock = REPO / "results" / ".sweep.lock"
    had_lock = lock.exists()  # a sweep from the repo leaves it (emptied); validate must not make one
    assert cli.main(["validate"]) == 0
    out = capsys.readouterr().out
    data = yaml.safe_load((REPO / "cluster.yaml").read_text())
    num_ckpts, hosts = len(data["checkpoints"]), [h["name"] for h in data["hosts"]]
    for plan, entries in data["plans"].items():
        per_host = dict.fromkeys(hosts, 0)
        for entry in entries:
            entry_hosts = hosts if entry.get("hosts", "all") == "all" else entry["hosts"]
            ckpts = entry.get("checkpoints", "all")
            for host in entry_hosts:
                per_host[host] += num_ckpts if ckpts == "all" else len(ckpts)
        total = sum(per_host.values())
        shown = ", ".join(f"{h} {n}" for h, n in per_host.items() if n)
        assert f"plan {plan}: {total} jobs" in out and shown in out, (plan, shown, out)
    assert lock.exists() == had_lock


def test_broken_file_lists_each_problem_with_its_key_path(tmp_path, capsys):
    data = yaml.safe_load((REPO / "cluster.yaml").read_text())
    data["hosts"].append(dict(data["hosts"][0]))  # a duplicate host
    data["plans"]["demo"][0]["hosts"] = ["local", "gx11"]  # an unknown host
    data["plans"]["demo"][1]["checkpoints"] = ["qwen9"]  # an unknown checkpoint
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["validate", "--cluster", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "labprobe validate: error: cluster.yaml: hosts[3].name: duplicate host 'gx10'",
        "labprobe validate: error: cluster.yaml: plans.demo[0].hosts[1]: unknown host 'gx11'",
        "labprobe validate: error: cluster.yaml: plans.demo[1].checkpoints[0]: unknown checkpoint 'qwen9'",
    ]
    data = yaml.safe_load((REPO / "cluster.yaml").read_text())
    data["hosts"][1]["gpus"] = "two"  # a wrong type
    data["store"]["rooot"] = "x"  # an unknown key
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["validate", "--cluster", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert err[0] == "labprobe validate: error: cluster.yaml: store: unknown key 'rooot'"
    assert err[1].startswith("labprobe validate: error: cluster.yaml: hosts[1].gpus: ") and "'two'" in err[1]


def _plan_p(tmp_path: Path, config: dict) -> Path:
    """The repo's cluster file plus plan `p`, whose second entry is a carrier with `config`."""
    data = yaml.safe_load((REPO / "cluster.yaml").read_text())
    data["plans"]["p"] = [
        {"probe": "mask", "hosts": ["local"]},
        {"probe": "carrier", "hosts": ["local"], "config": config},
    ]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_one_validation_path_speaks_the_words_of_where_the_value_came_from(tmp_path, capsys):
    # In the file: the key path of the value, no command-line spelling.
    assert cli.main(["validate", "--cluster", str(_plan_p(tmp_path, {"lora_rank": 0}))]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "labprobe validate: error: cluster.yaml: plans.p[1].config.lora_rank: must be >= 1, got 0"
    ]
    # On the command line: the same check, the option's spelling.
    checkpoint = REPO / "demo" / "checkpoints" / "qwen3-0.6b-base"
    assert cli.main(["probe", "carrier", "--checkpoint", str(checkpoint), "--lora-rank", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["labprobe probe: error: --lora-rank must be >= 1, got 0"]
    # A message naming two fields names each in the words of its edge.
    assert cli.main(["validate", "--cluster", str(_plan_p(tmp_path, {"steps": 9, "max_steps": 3}))]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "labprobe validate: error: cluster.yaml: plans.p[1].config.max_steps: max_steps 3 < steps 9"
    ]
    assert cli.main(["probe", "carrier", "--checkpoint", str(checkpoint), "--steps", "9", "--max-steps", "3"]) == 2
    assert capsys.readouterr().err.strip() == "labprobe probe: error: --max-steps 3 < --steps 9"


def test_types_are_checked_by_the_same_path_for_the_cli_and_the_file(tmp_path, capsys):
    checkpoint = REPO / "demo" / "checkpoints" / "qwen3-0.6b-base"
    assert cli.main(["probe", "carrier", "--checkpoint", str(checkpoint), "--lora-rank", "big"]) == 2
    cli_line = capsys.readouterr().err.strip()
    assert cli.main(["validate", "--cluster", str(_plan_p(tmp_path, {"lora_rank": "big"}))]) == 2
    file_line = capsys.readouterr().err.strip()
    cli_says = cli_line.removeprefix("labprobe probe: error: --lora-rank ")
    file_says = file_line.removeprefix("labprobe validate: error: cluster.yaml: plans.p[1].config.lora_rank: ")
    assert cli_says == file_says == "should be a valid integer, unable to parse string as an integer (got 'big')"


def _names(tmp_path: Path, **change) -> Path:
    data = yaml.safe_load((REPO / "cluster.yaml").read_text())
    data["store"]["root"] = str(tmp_path / "store")
    if "checkpoint" in change:
        data["checkpoints"][0]["name"] = change["checkpoint"]
        data["plans"] = {"demo": [{"probe": "mask", "checkpoints": [change["checkpoint"]]}]}
        data.pop("schedule")
    if "plan" in change:
        data["plans"] = {change["plan"]: data["plans"]["demo"]}
        data.pop("schedule")
    if "root" in change:
        data["store"]["root"] = change["root"]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


def test_names_are_checked_by_the_bytes_of_the_file_names_they_become(tmp_path, capsys):
    import os

    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    assert cli.main(["validate", "--cluster", str(_names(tmp_path, checkpoint="q" * 300))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("labprobe validate: error: cluster.yaml: checkpoints[0].name: 'qqq")
    assert "is 300 bytes and becomes the file name checkpoint=<name>" in err[0] and len(err[0]) < 400, err
    # A plan's name becomes its log's file name too (non-ASCII names are refused by the safe set).
    assert cli.main(["validate", "--cluster", str(_names(tmp_path, plan="p" * 260))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is 260 bytes and becomes the file name sweep-<name>.log" in err[0], err
    assert cli.main(["validate", "--cluster", str(_names(tmp_path, plan="é" * 130))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a plan's name may hold only letters, digits" in err[0], err
    # A name that fits passes, with the margin the writers' temporary names need.
    fits = "q" * (name_max - 32 - len("checkpoint="))
    assert cli.main(["validate", "--cluster", str(_names(tmp_path, checkpoint=fits))]) == 0
    capsys.readouterr()
    assert cli.main(["validate", "--cluster", str(_names(tmp_path, checkpoint=fits + "q"))]) == 2
    capsys.readouterr()


def test_a_store_root_too_deep_for_path_max_is_refused(tmp_path, capsys):
    import os

    path_max = os.pathconf(tmp_path, "PC_PATH_MAX")
    deep = tmp_path.joinpath(*["d" * 200] * (path_max // 201))  # each component fits, the whole does not
    assert cli.main(["validate", "--cluster", str(_names(tmp_path, root=str(deep)))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cluster.yaml: store.root: paths under" in err[0] and f"PATH_MAX {path_max}" in err[0]
    assert len(err[0]) < 400, err


def test_json_gives_ok_the_plans_job_counts_and_errors_with_key_paths(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert cli.main(["validate", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)  # one JSON object, nothing else on stdout
    assert captured.err == "" and out["ok"] is True and out["errors"] == []
    data = yaml.safe_load((REPO / "cluster.yaml").read_text())
    assert set(out["plans"]) == set(data["plans"])
    demo = data["plans"]["demo"]  # every demo entry runs on host local, once per checkpoint it names
    expected = sum(
        len(e["checkpoints"]) if e.get("checkpoints", "all") != "all" else len(data["checkpoints"]) for e in demo
    )
    gpu = sum(len(e["checkpoints"]) for e in demo if e["probe"] in ("profile", "carrier"))
    assert out["plans"]["demo"] == {"jobs": expected, "gpu_jobs": gpu, "hosts": {"local": expected}}
    assert out["schedule"]["plan"] == data["schedule"]["plan"]

    data["plans"]["demo"][0]["hosts"] = ["local", "gx11"]
    data["plans"]["demo"][1]["config"] = {"seq_len": 1}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["validate", "--cluster", str(path), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["plans"] == {}
    assert out["errors"] == [
        {"file": "cluster.yaml", "key": "plans.demo[0].hosts[1]", "message": "unknown host 'gx11'"},
        {"file": "cluster.yaml", "key": "plans.demo[1].config.seq_len", "message": "must be >= 2, got 1"},
    ]

    path.write_text("hosts: [")
    assert cli.main(["validate", "--cluster", str(path), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["errors"][0]["key"] is None
    assert out["errors"][0]["message"].startswith("cluster.yaml: malformed YAML")
