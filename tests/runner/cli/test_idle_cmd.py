"""`labprobe idle` over the shared Ray cluster: every host read on its own node, bad input exit 2."""

from __future__ import annotations

import json

import pytest
from nvml_util import GIB, gpu, write_fake

from runner.cli import main


def test_labprobe_idle_reads_every_host(ray_cluster, fake_nvml_dir, tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "exp").mkdir(parents=True)
    (runs / "exp" / "log.txt").write_text("step 10")
    (tmp_path / "cluster.yaml").write_text(f"""
hosts:
  - {{name: gx10, address: 10.0.0.1, gpus: 1, runs_root: {runs}}}
  - {{name: ana-ml2, address: 10.0.0.2, gpus: 2, idle: {{max_util_pct: 50}}}}
  - {{name: ghost, address: 10.0.0.3}}
""")
    write_fake(fake_nvml_dir, "gx10", [gpu(0, name="NVIDIA GB10")])
    write_fake(fake_nvml_dir, "ana-ml2", [gpu(0, util=(30, 40)), gpu(1, processes=[(4242, 9 * GIB)])])
    code = main(["idle", "--cluster", str(tmp_path / "cluster.yaml"), "--json", "--timeout-s", "20"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 1
    got = {(r["host"], r["gpu"]): r for r in rows}
    assert set(got) == {("gx10", 0), ("ana-ml2", 0), ("ana-ml2", 1), ("ghost", None)}
    assert got["gx10", 0]["verdict"] == "busy" and "log.txt changed" in got["gx10", 0]["reason"]
    assert got["gx10", 0]["node_host"] == "gx10"  # read on the node carrying the label
    assert got["ana-ml2", 0]["verdict"] == "idle"  # 40% is under this host's 50% threshold
    assert got["ana-ml2", 1]["verdict"] == "busy" and got["ana-ml2", 1]["pids"] == [4242]
    assert got["ghost", None]["verdict"] == "unreachable" and "ghost" in got["ghost", None]["reason"]
    write_fake(fake_nvml_dir, "ana-ml2", [gpu(0)])
    code = main(["idle", "--cluster", str(tmp_path / "cluster.yaml")])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1 and len(lines) == 2 + 3  # header, rule, one line per GPU or host
    assert any(line.split()[:4] == ["ana-ml2", "0", "NVIDIA", "H200"] and "idle" in line for line in lines)


def test_labprobe_idle_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert main(["idle", "--timeout-s", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "labprobe idle: error: argument --timeout-s: expected a finite number of seconds > 0 and <= 1e+07, got '0'"
    )
    assert main(["idle", "--cluster", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml: no such cluster file" in capsys.readouterr().err


def test_a_reading_on_a_node_without_one_of_the_hosts_labels_is_an_error(fake_nvml_dir):
    from runner.cli.idle import read_pinned
    from runner.gpu.idle import Thresholds

    write_fake(fake_nvml_dir, "gx10", [gpu(0, name="NVIDIA GB10")])
    # Outside Ray this process carries no host label: it must not read as gx10.
    with pytest.raises(RuntimeError, match=r"labprobe.host='' is not one of \['gx10'\]"):
        read_pinned({"gx10": (None, Thresholds())})


def test_a_zero_threshold_that_would_read_every_card_busy_is_bad_input(tmp_path, capsys):
    for field in ("max_util_pct", "max_mem_used_mib"):
        cluster = tmp_path / f"{field}.yaml"
        cluster.write_text(
            f"store:\n  root: store\nhosts:\n  - name: gx10\n    address: 127.0.0.1\n    gpus: 1\n"
            f"    idle:\n      {field}: 0\n"
        )
        assert main(["idle", "--cluster", str(cluster)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and field in err
