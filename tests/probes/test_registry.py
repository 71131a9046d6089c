"""A probe is one unit: the runner never names a probe, and a probe from a package of its own, registered
through the documented hook (`LABPROBE_PROBES`), is swept, stored, compared, followed and reported with no
runner file touched (docs/adding-a-probe.md)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import probes
from runner.store.store import Store

REPO = Path(__file__).resolve().parents[2]
CHECKPOINTS = REPO / "demo" / "checkpoints"


def name_literals(paths: list[Path], names: set[str]) -> list[str]:
    """`file:line: 'name'` for every string constant equal to a probe's name (f-string parts included)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append((str(path), node.lineno, node.col_offset, node.value))
    return [f"{file}:{line}: {value!r}" for file, line, _, value in sorted(found)]


def test_no_probe_name_is_a_string_literal_in_the_runner():
    files = sorted((REPO / "runner").rglob("*.py"))
    assert len(files) > 50  # the scan reads the runner, not an empty folder
    assert name_literals(files, set(probes.REGISTRY)) == []


def test_the_scan_finds_a_probe_name_however_it_is_written(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        textwrap.dedent(
            """
            DEFAULTS = {"carrier": "carriers"}
            def f(probe):
                return probe == 'mask' or probe in ("padding",) or f"{probe}" == "profile"
            """
        )
    )
    assert [line.split(": ", 1)[1] for line in name_literals([planted], set(probes.REGISTRY))] == [
        "'carrier'",
        "'mask'",
        "'padding'",
        "'profile'",
    ]


# -- a toy probe from a package of its own ------------------------------------------------------------------
TOY = {
    "__init__.py": '"""A probe outside labprobe: config and run (probe), presentation (present), registry entry (spec)."""\n',
    "probe.py": '''
        """The `toy` probe: a made-up timing per size, so the runner has rows to store, compare and draw."""

        from __future__ import annotations

        import dataclasses
        from pathlib import Path

        from probes import Check, ProbeResult


        @dataclasses.dataclass(frozen=True, kw_only=True)
        class Config:
            checkpoint: Path
            """The checkpoint (filled by the runner per job)."""
            scale: float = 1.0
            """Seconds per unit of size."""


        @dataclasses.dataclass(frozen=True)
        class Row:
            size: int
            value_s: float


        @dataclasses.dataclass(frozen=True)
        class Note:
            size: int
            twice_s: float


        def run(config: Config) -> ProbeResult:
            rows = [Row(size=n, value_s=n * config.scale) for n in (1, 2, 4)]
            return ProbeResult(
                probe="toy",
                config=config,
                tables={"rows": rows, "notes": [Note(size=r.size, twice_s=2 * r.value_s) for r in rows]},
                summary={"total_s": sum(r.value_s for r in rows)},
                checks=[Check(name="sizes_timed", ok=True, detail=f"{len(rows)} sizes")],
            )
    ''',
    "present.py": '''
        """How the runner shows the toy: its own headline, compare's and history's defaults, a plot."""

        from __future__ import annotations

        from probes import GroupedBars, Presentation


        def headline(rows: list[dict]) -> str:
            return f"Toy total over {len(rows)} answer(s): {sum(r['total_s'] for r in rows):g} s."


        PRESENTATION = Presentation(
            headline=headline,
            compare=(("rows", "value_s"),),
            history_table="rows",
            plots=(GroupedBars(table="rows", group="size", value="value_s", title="toy: value per size, by host"),),
        )
    ''',
    "spec.py": """
        from probes import ProbeSpec

        SPEC = ProbeSpec(name="toy", module="toyprobe.probe", settles="a toy timing per size", present="toyprobe.present")
    """,
}


@pytest.fixture
def toy_env(tmp_path) -> dict[str, str]:
    """The toy package written to tmp_path and an environment that registers it through the hook."""
    package = tmp_path / "pkgs" / "toyprobe"
    package.mkdir(parents=True)
    for name, text in TOY.items():
        (package / name).write_text(textwrap.dedent(text).lstrip())
    hosts = [{"name": h, "address": "127.0.0.1", "checkpoints_root": str(CHECKPOINTS)} for h in ("alpha", "beta")]
    cluster = {
        "store": {"root": "store"},
        "hosts": hosts,
        "checkpoints": [{"name": "qwen3-0.6b-base", "path": "qwen3-0.6b-base"}],
        "plans": {"toys": [{"probe": "toy", "hosts": "all", "checkpoints": "all", "config": {"scale": 0.5}}]},
    }
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False))
    path = os.pathsep.join([str(tmp_path / "pkgs"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, probes.ENV_PROBES: "toyprobe.spec", "PYTHONPATH": path}


def labprobe(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "runner.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    return proc


def test_a_toy_probe_from_its_own_package_is_swept_stored_compared_and_reported(toy_env, tmp_path):
    cluster = str(tmp_path / "cluster.yaml")
    for host in ("alpha", "beta"):  # one job a host, inline: no Ray
        sweep = labprobe(
            ["sweep", "--cluster", cluster, "--plan", "toys", "--inline", host, "--report"], toy_env, tmp_path
        )
        assert sweep.returncode == 0, sweep.stderr[-3000:]
    store = Store(tmp_path / "store")
    assert {"toy.rows", "toy.notes"} <= set(store.table_names())
    stored = store.read("toy.rows")
    assert sorted(stored["host"].unique()) == ["alpha", "beta"]
    assert sorted(stored["value_s"]) == [0.5, 0.5, 1.0, 1.0, 2.0, 2.0]  # 0.5 s per unit of size 1, 2, 4

    compared = labprobe(["compare", "--probe", "toy", "--cluster", cluster, "--json"], toy_env, tmp_path)
    assert compared.returncode == 0, compared.stderr[-3000:]
    result = json.loads(compared.stdout)
    assert (result["table"], result["metric"], result["hosts"]) == ("rows", "value_s", ["alpha", "beta"])
    assert sorted(r["values"]["beta"] for r in result["rows"]) == [0.5, 1.0, 2.0]

    followed = labprobe(["history", "--probe", "toy", "--cluster", cluster, "--json"], toy_env, tmp_path)
    assert followed.returncode == 0, followed.stderr[-3000:]
    assert "toy.rows" in followed.stdout  # the declared table of the two it wrote, not "name one"

    reports = sorted((tmp_path / "store" / "reports").glob("*.html"))
    page = reports[-1].read_text()
    assert "Toy total over 1 answer(s): 3.5 s." in page  # beta's run: its headline, written by the toy
    assert 'alt="toy: value per size, by host"' in page  # its declared plot
    assert "<h3>toy.notes</h3>" in page  # an undeclared table: with the other tables


def test_without_the_hook_the_toy_is_unknown(toy_env, tmp_path):
    env = {k: v for k, v in toy_env.items() if k != probes.ENV_PROBES}
    proc = labprobe(["probe", "toy", "--help"], env, tmp_path)
    assert proc.returncode == 2 and "unknown probe 'toy'" in proc.stderr


def test_a_hook_module_that_fails_to_import_says_so_never_unknown_probe(tmp_path):
    env = {**os.environ, probes.ENV_PROBES: "no_such_lab.spec"}
    proc = subprocess.run(
        [sys.executable, "-c", "import probes"], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 1 and "ModuleNotFoundError: No module named 'no_such_lab'" in proc.stderr


def test_register_takes_a_new_name_once_and_gives_the_defaults_to_a_probe_that_declares_nothing():
    spec = probes.ProbeSpec(name="bare", module="no.such.module", settles="nothing", gpu=True)
    probes.register(spec)
    try:
        assert probes.REGISTRY["bare"] is spec and "bare" in probes.GPU_PROBES
        assert probes.presentation("bare") == probes.Presentation() and probes.answer("bare") is None
        with pytest.raises(ValueError, match="'bare' is registered already"):
            probes.register(spec)
    finally:
        probes.unregister("bare")
    assert "bare" not in probes.REGISTRY and "bare" not in probes.GPU_PROBES
    with pytest.raises(ValueError, match="must be a Python identifier"):
        probes.ProbeSpec(name="two.parts", module="m", settles="s")
