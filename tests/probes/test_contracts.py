"""Contracts between probes are typed: a probe reads another probe's result only through that probe's contract
module (probes/<name>/contract.py), never by its printed table names.

The table rule is read from the code (AST): every key a module of probes/<a>/ reads from a result's tables is a
table probes/<a>/ writes itself (its contract reads the same names its probe writes), and no kit module reads
one. A key is a string literal or a name bound to one (a module constant, or one imported from a probes
module). The contracts then read back what their probes write: rows of the producers' own row types.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import probes
from probes.result import row_to_dict

ROOT = Path(__file__).resolve().parents[2]
KITS = ("step", "corpus")


def _is_tables(node: ast.AST) -> bool:
    """`tables`, `x.tables`, `x["tables"]` or `x.get("tables", ...)`: an expression holding a result's tables."""
    if isinstance(node, ast.Name):
        return node.id == "tables"
    if isinstance(node, ast.Attribute):
        return node.attr == "tables"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "tables"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "tables"
    return False


def _constants(tree: ast.Module, path: Path) -> dict[str, str]:
    """Names bound to a string in `tree`: its module-level `NAME = "..."`, and those it imports from probes."""
    found = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for n in tree.body:
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("probes.") and n.level == 0:
            source = ROOT.joinpath(*n.module.split(".")).with_suffix(".py")
            if source.exists() and source != path:
                theirs = _constants(ast.parse(source.read_text()), source)
                found |= {a.asname or a.name: theirs[a.name] for a in n.names if a.name in theirs}
    return found


def _key(node: ast.AST, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return constants.get(node.id) if isinstance(node, ast.Name) else None


def _dict_keys(node: ast.AST, constants: dict[str, str]) -> set[str]:
    return (
        {k for k in (_key(n, constants) for n in node.keys if n is not None) if k}
        if isinstance(node, ast.Dict)
        else set()
    )


def _writes(node: ast.AST, constants: dict[str, str]) -> set[str]:
    """Table names `node` writes: `tables[K] = ...`, `tables = {K: ...}`, `tables |= {K: ...}`,
    `tables.update(K=...)`, `tables.setdefault(K, ...)`, `ProbeResult(..., tables={K: ...})`."""
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        keys = {_key(t.slice, constants) for t in targets if isinstance(t, ast.Subscript) and _is_tables(t.value)}
        if any(_is_tables(t) for t in targets) and node.value is not None:  # tables = {K: ...}, tables |= {K: ...}
            keys |= _dict_keys(node.value, constants)
        return {k for k in keys if k}
    if not isinstance(node, ast.Call):
        return set()
    keys = {k for kw in node.keywords if kw.arg == "tables" for k in _dict_keys(kw.value, constants)}
    if isinstance(node.func, ast.Attribute) and _is_tables(node.func.value):
        if node.func.attr == "update":
            keys |= {kw.arg for kw in node.keywords if kw.arg} | {
                k for a in node.args for k in _dict_keys(a, constants)
            }
        elif node.func.attr == "setdefault" and node.args:
            keys |= {k for k in [_key(node.args[0], constants)] if k}
    return keys


def _reads(node: ast.AST, constants: dict[str, str]) -> set[str]:
    """Table names `node` reads: `tables[K]`, `tables.get(K)`, or `f(tables, K, ...)` (a helper given both)."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_tables(node.value):
        return {k for k in [_key(node.slice, constants)] if k}
    if not isinstance(node, ast.Call):
        return set()
    if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and _is_tables(node.func.value) and node.args:
        return {k for k in [_key(node.args[0], constants)] if k}
    at = next((i for i, a in enumerate(node.args) if _is_tables(a)), None)
    following = node.args[at + 1 : at + 2] if at is not None else []
    return {k for k in (_key(a, constants) for a in following) if k}


def table_use(path: Path) -> tuple[set[str], set[str]]:
    """(tables written, tables read) by the module at `path`."""
    tree = ast.parse(path.read_text())
    constants = _constants(tree, path)
    written: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        written |= _writes(node, constants)
        read |= _reads(node, constants)
    return written, read


def violations(modules: dict[str, Path]) -> list[str]:
    """Each module of probes/<a>/ reading a table probes/<a>/ does not write, and each kit module reading one."""
    use = {name: table_use(path) for name, path in modules.items()}
    packages = {name.split(".")[1] for name in modules if name.count(".") >= 2}
    writes = {p: set().union(*(w for n, (w, _) in use.items() if n.split(".")[1:2] == [p])) for p in packages}
    bad = []
    for name, (_, read) in sorted(use.items()):
        package = name.split(".")[1]
        own = set() if package in KITS else writes[package]
        for table in sorted(read - own):
            owners = sorted(p for p, w in writes.items() if table in w)
            bad.append(f"{name} reads table {table!r} (written by {', '.join(owners) or 'no probe'})")
    return bad


def probe_modules() -> dict[str, Path]:
    """Every module in a package under probes/ (the door's own modules are not in one)."""
    return {
        ".".join(p.relative_to(ROOT).with_suffix("").parts): p
        for p in (ROOT / "probes").glob("*/**/*.py")
        if p.name != "__init__.py"
    }


def test_no_probe_module_reads_another_probes_tables_and_no_kit_reads_any():
    assert violations(probe_modules()) == []


def test_the_rule_catches_a_read_of_another_probes_table_by_literal_by_constant_and_through_a_helper(tmp_path):
    files = {
        "probes.profile.probe": 'FIT = "fit"\ndef run(result):\n    result.tables[FIT] = []\n    result.tables |= {"variants": []}\n',
        "probes.profile.answer": 'def figures(tables):\n    return tables["fit"]\n',
        "probes.carrier.probe": 'def run(r):\n    r.tables["carriers"] = []\n    r.tables.setdefault("numerics", [])\n',
        "probes.goodput.probe": (
            'SCALING = "scaling"\ndef read(result):\n    fit = result["tables"]["fit"]\n'
            "    rows = result.get(\"tables\", {}).get(SCALING)\n    return _table(result['tables'], 'carriers', 'x')\n"
        ),
        "probes.step.steptime.model": 'def read(tables):\n    return tables.get("variants")\n',
    }
    modules = {}
    for name, text in files.items():
        modules[name] = tmp_path / (name.replace(".", "_") + ".py")
        modules[name].write_text(text)
    assert violations(modules) == [
        "probes.goodput.probe reads table 'carriers' (written by carrier)",
        "probes.goodput.probe reads table 'fit' (written by profile)",
        "probes.goodput.probe reads table 'scaling' (written by no probe)",
        "probes.step.steptime.model reads table 'variants' (written by profile)",
    ]


def test_each_stored_input_the_registry_names_is_a_table_its_probes_contract_reads():
    """The registry keeps table names for the runner's store reader: they are the producer's, read by its
    contract (a renamed table fails here, not as an empty stored input)."""
    checked = 0
    for spec in probes.REGISTRY.values():
        for stored in spec.stored_inputs:
            contract = ROOT / "probes" / stored.probe / "contract.py"
            written = set().union(*(table_use(p)[0] for p in contract.parent.glob("*.py")))
            _, read = table_use(contract)
            assert set(stored.tables) <= read & written, (spec.name, stored.field)
            checked += 1
    assert checked >= 2  # goodput's profile and carrier


def test_carriers_rows_read_back_through_its_contract_as_measured_steps():
    from probes.carrier import contract
    from probes.carrier.probe import CarrierRow
    from probes.step.steptime import stack_step
    from probes.step.variants.numerics import NumericsRow

    rows = [
        CarrierRow(model="m", variant="baseline", params_total=10, params_trainable=1, tokens_per_step=4096,
                   step_s=0.40, mean_step_s=0.44, trustworthy=True, launch_bound=False),
        CarrierRow(model="m", variant="compile", params_total=10, params_trainable=1, tokens_per_step=4096,
                   step_s=0.20, mean_step_s=0.22, trustworthy=True, launch_bound=True),
    ]  # fmt: skip
    verdicts = [NumericsRow(model="m", variant="compile", within_tolerance=False)]
    result = {
        "config": {"batch_size": 2, "seq_len": 2048, "rows": "packed", "lora_rank": 16},
        "summary": {"device": "NVIDIA H100"},
        "tables": {contract.CARRIERS: [row_to_dict(r) for r in rows], contract.NUMERICS: [row_to_dict(verdicts[0])]},
    }
    run = contract.measured_run(result, "c.json")
    assert [dataclasses.astuple(s) for s in run.steps] == [
        ("m", r.variant, r.status, r.step_s, r.mean_step_s, r.tokens_per_step, r.trustworthy, r.launch_bound)
        for r in rows
    ]
    assert run.verdicts == {"m": {"compile": False}} and (run.batch_size, run.seq_len, run.rows) == (2, 2048, "packed")
    assert run.setup == {"lora_rank": 16, "card": "NVIDIA H100"}
    step = stack_step.choose(run, "compile")
    assert step.factor == pytest.approx(0.5) and step.within_tolerance is False and not step.trustworthy
    assert contract.measured_run({"tables": {}}, "c.json") is None  # no carrier rows: another contract's turn


def test_a_profiles_fit_and_variants_read_back_through_its_contract():
    from probes.profile import contract
    from probes.profile.measure import PaddingRow
    from probes.profile.variants import VariantRow
    from probes.step.steptime.fit import FitRow, ScalingRow

    fit = [FitRow(term=t, coef=c, unit="s", share_at_production_pct=0.0) for t, c in zip(("quadratic", "linear", "fixed"), (1e-9, 2e-6, 0.05))]  # fmt: skip
    scaling = [
        ScalingRow(seq_len=128, batch_size=2, tokens=256, step_s=0.06, launch_bound=True),
        ScalingRow(seq_len=512, batch_size=2, tokens=1024, step_s=0.07, launch_bound=False, in_fit=True),
        ScalingRow(seq_len=2048, batch_size=2, tokens=4096, step_s=0.10, launch_bound=False, in_fit=True),
        ScalingRow(seq_len=4096, batch_size=2, tokens=8192, status="oom"),
    ]
    padding = [PaddingRow(case="half_padded", shape="2x2048", real_tokens=3072, attention_mask=True,
                          fast_path_all_layers=False, step_s=0.11, spread_pct=1.0, penalty_same_shape_pct=4.0)]  # fmt: skip
    variants = [VariantRow(variant="baseline", tokens=4096, step_s=0.4, trustworthy=True, launch_bound=False),
                VariantRow(variant="compile", tokens=4096, step_s=0.3, trustworthy=True, launch_bound=False)]  # fmt: skip
    tables = {
        contract.FIT: fit,
        contract.SCALING: scaling,
        contract.PADDING_PENALTY: padding,
        contract.VARIANTS: variants,
    }
    result = {
        "config": {"checkpoint": "/m/qwen3-4b-base", "variant": ["compile"], "batch_size": 2, "seq_len": 2048},
        "summary": {"new_shape_s": 0.8},
        "tables": {name: [row_to_dict(r) for r in rows] for name, rows in tables.items()},
    }
    model = contract.step_model(result, "p.json")
    assert (model.quadratic_s, model.linear_s, model.fixed_s) == (1e-9, 2e-6, 0.05)
    assert (model.min_len, model.max_len, model.fit_batch_size, model.launch_points) == (512, 2048, 2, ((256, 0.06),))
    assert (model.mask_penalty_pct, model.new_shape_s, model.model, model.variant) == (4.0, 0.8, "qwen3-4b-base", None)
    run = contract.measured_run(result, "p.json")
    assert [(s.model, s.variant, s.step_s, s.tokens_per_step) for s in run.steps] == [
        ("qwen3-4b-base", "baseline", 0.4, 4096),
        ("qwen3-4b-base", "compile", 0.3, 4096),
    ]
