"""The architecture, enforced: data flows top-down between the runner's packages, no import cycles.

    cli  ->  analysis, chores  ->  dispatch  ->  lab  ->  gpu, store  ->  hosts  ->  clock, tables, log

(lab sits above store: the cluster file names the store's root, and the store says how a root is read,
a folder or an object-store URL: runner.store.root.) A runner module may import its own package and any package of a lower layer, never one of its own layer
or above. From probes the runner imports only the door: `probes` (the registry) and `probes.result`.
Inside probes, a package per probe (`probes.<name>`) may import the two kits (`probes.step`,
`probes.corpus`) and the door; of another probe only its contract (`probes.<other>.contract`: what it gives
other probes, typed), and a contract nothing of another probe; a kit never imports a probe. Imports inside
functions count too (a lazy import is still a dependency). Modules split where the code has a seam,
not at a line count; functions stay at most 60 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {
    "cli": 6,
    "analysis": 5,
    "chores": 5,
    "dispatch": 4,
    "lab": 3,
    "gpu": 2,
    "store": 2,
    "hosts": 1,
    "clock": 0,
    "tables": 0,
    "log": 0,
}
MAX_LOOSE_MODULES = 3
KITS = ("step", "corpus")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__")


def imported(path: Path) -> set[str]:
    """Every project module `path` imports (`from a import b` counts `a` and, if a module, `a.b`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.split(".")[0] in ("runner", "probes")}


def project_modules() -> dict[str, Path]:
    files = list((ROOT / "runner").rglob("*.py")) + list((ROOT / "probes").rglob("*.py"))
    return {module_name(f): f for f in files}


def test_every_runner_package_has_a_layer_and_few_modules_are_loose():
    runner = ROOT / "runner"
    tops = {
        p.stem if p.is_file() else p.name
        for p in runner.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")
    }
    assert tops <= set(LAYERS), f"runner/ items without a layer: {sorted(tops - set(LAYERS))}"
    loose = [p.name for p in runner.glob("*.py") if p.stem != "__init__"]
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def layering_violations(modules: dict[str, Path]) -> list[str]:
    bad = []
    for name, path in modules.items():
        parts = name.split(".")
        if parts[0] != "runner" or len(parts) < 2:
            continue
        for target in imported(path):
            tparts = target.split(".")
            if tparts[0] == "probes" or len(tparts) < 2 or tparts[1] == parts[1]:
                continue
            if LAYERS[tparts[1]] >= LAYERS[parts[1]]:
                bad.append(f"{name} imports {target}")
    return sorted(set(bad))


def test_no_layer_imports_its_own_layer_or_above():
    assert layering_violations(project_modules()) == []


def probe_names() -> set[str]:
    """The probe packages: every package under probes/ that is not a kit."""
    return {p.name for p in (ROOT / "probes").iterdir() if (p / "__init__.py").exists()} - set(KITS)


def _through_contract(name: str, target: str) -> bool:
    """`target`, of another probe, is its contract (or its empty package, named by `from probes.x import
    contract`), and `name` is no contract itself."""
    tparts = target.split(".")
    return name.split(".")[2:3] != ["contract"] and (len(tparts) == 2 or tparts[2] == "contract")


def probe_violations(modules: dict[str, Path], probes: set[str]) -> list[str]:
    """Kits importing a probe, probes importing each other past a contract, the runner reaching past the door."""
    bad = []
    for name, path in modules.items():
        parts = name.split(".")
        for target in imported(path):
            tparts = target.split(".")
            if tparts[0] != "probes" or len(tparts) < 2 or tparts[1] not in probes | set(KITS):
                continue  # the door (probes, probes.result, a name the registry module exports)
            if parts[0] == "runner":
                bad.append(f"{name} imports {target} past the door")
            elif parts[0] == "probes" and len(parts) > 1 and parts[1] in KITS and tparts[1] in probes:
                bad.append(f"kit {name} imports probe {target}")
            elif parts[0] == "probes" and len(parts) > 1 and parts[1] in probes and tparts[1] in probes - {parts[1]}:
                if not _through_contract(name, target):
                    bad.append(f"probe {name} imports probe {target}")
    return sorted(set(bad))


def test_every_probe_is_a_package_with_config_probe_answer_and_the_registry_names_them_all():
    import probes

    assert probe_names() == set(probes.REGISTRY)
    for name in probe_names():
        assert {"config.py", "probe.py", "answer.py"} <= {p.name for p in (ROOT / "probes" / name).iterdir()}, name


def test_kits_never_import_a_probe_probes_never_each_other_runner_only_the_door():
    assert probe_violations(project_modules(), probe_names()) == []


def test_the_probe_rules_catch_a_cross_probe_import_a_kit_importing_a_probe_and_the_runner_past_the_door(tmp_path):
    """goodput reading padding's and bucket's contracts passes; a contract importing another probe's does not."""
    files = {
        "probes.mask.probe": "from probes.padding.probe import run\nfrom probes.step import models\n",
        "probes.goodput.probe": "from probes.padding import contract\nfrom probes.bucket.contract import read\n",
        "probes.padding.contract": "from probes.bucket import contract\n",
        "probes.corpus.batching": "from probes.bucket import probe as bucket\nfrom probes.result import require\n",
        "runner.cli.goodput": "import probes\nfrom probes.goodput.probe import Config\nfrom probes.result import X\n",
    }
    modules = {}
    for name, text in files.items():
        modules[name] = tmp_path / (name.replace(".", "_") + ".py")
        modules[name].write_text(text)
    assert probe_violations(modules, {"mask", "padding", "bucket", "goodput"}) == [
        "kit probes.corpus.batching imports probe probes.bucket",
        "kit probes.corpus.batching imports probe probes.bucket.probe",
        "probe probes.mask.probe imports probe probes.padding.probe",
        "probe probes.mask.probe imports probe probes.padding.probe.run",
        "probe probes.padding.contract imports probe probes.bucket",
        "probe probes.padding.contract imports probe probes.bucket.contract",
        "runner.cli.goodput imports probes.goodput.probe past the door",
        "runner.cli.goodput imports probes.goodput.probe.Config past the door",
    ]


def test_probes_never_import_the_runner_or_ray():
    for name, path in project_modules().items():
        if name.startswith("probes"):
            tree = ast.parse(path.read_text())
            roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            roots |= {
                n.module.split(".")[0]
                for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
            }
            assert not roots & {"runner", "ray"}, f"{name} imports {sorted(roots & {'runner', 'ray'})}"


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle among the modules of `graph`, or [] (depth-first search, colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_import_cycle_between_modules():
    modules = project_modules()
    graph = {name: {t for t in imported(path) if t in modules and t != name} for name, path in modules.items()}
    # a package's __init__ imported for a submodule is not an edge back from that submodule
    assert find_cycle(graph) == []


@pytest.mark.parametrize(
    "graph, cyclic",
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ],
)
def test_the_cycle_finder_finds_cycles(graph, cyclic):
    assert bool(find_cycle(graph)) is cyclic


def test_the_layering_check_catches_an_upward_import(tmp_path):
    low = tmp_path / "runner" / "store" / "x.py"
    low.parent.mkdir(parents=True)
    low.write_text("from runner.cli import main\n")
    assert imported(low) == {"runner.cli", "runner.cli.main"}
    assert layering_violations({"runner.store.x": low}) == [
        "runner.store.x imports runner.cli",
        "runner.store.x imports runner.cli.main",
    ]


def test_functions_at_most_60_lines():
    long_functions = []
    for name, path in project_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    long_functions.append(f"{name}.{node.name}: {length} lines")
    assert long_functions == []
