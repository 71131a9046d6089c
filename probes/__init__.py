"""labprobe's instruments: a package per probe (`probes.<name>`: config, probe, answer, present) and two kits
shared by them (`probes.step`, `probes.corpus`). This module's registry, `probes.result` and `probes.format`
are the door: the runner imports nothing else from probes.

A probe is one unit. Its entry in REGISTRY (a `ProbeSpec`) says where its code is, whether it needs a GPU
and whether it is slow on a CPU; its `present` module declares how the runner shows it (a `Presentation`:
headline, default tables and metrics, plots, report sections). The runner loops over what probes declare
and never names one, so adding a probe touches no runner file (docs/adding-a-probe.md).

Probes from outside this package join through one explicit hook: `LABPROBE_PROBES`, a comma-separated list
of modules each holding `SPEC = ProbeSpec(...)`, read once when `probes` is first imported (or `register`
from Python). Modules are imported on demand so that `labprobe probe padding` does not pay for torch; an
ImportError inside a probe module propagates as itself, never as "probe not found".
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from probes.result import Check, InputError, ProbeResult
from probes.step.train.checkpoint import read_config  # the runner fingerprints a checkpoint's config.json with it
from probes.step.variants.names import canonical as variant_name  # compare matches --variant as the store keeps names

__all__ = [
    "ANSWER",
    "ENV_PROBES",
    "GPU_PROBES",
    "REGISTRY",
    "SUMMARY",
    "CategoryBars",
    "Check",
    "GroupedBars",
    "HostTables",
    "InputError",
    "Presentation",
    "ProbeResult",
    "ProbeSpec",
    "ScalingCurves",
    "StoredInput",
    "SweepLines",
    "answer",
    "config_class",
    "get",
    "presentation",
    "read_config",
    "register",
    "run",
    "variant_name",
]

SUMMARY = "summary"
"""The pseudo-table of a job's summary figures (the `summary_json` of each job row), for `compare`."""
ANSWER = "answer"
"""The pseudo-table of a job's answer figures, worded as the sweep's end and the report word them, for
`compare` (a text figure, such as mask's `full_fast_path`, is compared as it is worded)."""


# -- what a probe declares for the report's plots and sections (the runner draws them) --------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupedBars:
    """The report's host comparison: `value` per `group`, one bar per host, a panel per checkpoint."""

    table: str
    group: str
    value: str
    title: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepLines:
    """The report's host comparison: `y` against `x`, one line per host and checkpoint."""

    table: str
    x: str
    y: str
    title: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostTables:
    """A report section over every table of the probe: per checkpoint, its rows by host (what all hosts share
    said once above), the hosts whose job did not run ok, and bars of the metrics `bar_metrics` picks."""

    title: str
    facts: tuple[str, ...] = ()
    """Columns that describe the work, not the host (parameter counts): said once where every host agrees."""
    bar_metrics: Callable[[Any], list[tuple[str, str, float]]] | None = None
    """(rows: a DataFrame of one checkpoint's baseline rows) -> (column, label, scale) per bar chart drawn."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScalingCurves:
    """A report section: per checkpoint, `y` against the first of `x` the table has, one line per host, the fit
    dashed (column `fit`), and the values as a table; without an `x` column, the rows themselves."""

    table: str
    title: str
    x: tuple[str, ...]
    y: str
    """The measured column; where absent, the table's first column ending in `_s`."""
    fit: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CategoryBars:
    """A report section: per checkpoint, `value` (times `scale`, in `unit`) stacked by `category`, a bar per
    host, and the same as a table, largest category first."""

    table: str
    title: str
    category: str
    value: str
    """Where absent, the table's default metric (runner.analysis.drift)."""
    scale: float = 1.0
    unit: str = ""
    table_unit: str = ""
    """The unit as the table's first column says it (`ms/step`)."""


Plot = GroupedBars | SweepLines
Section = HostTables | ScalingCurves | CategoryBars


@dataclasses.dataclass(frozen=True, kw_only=True)
class Presentation:
    """How the runner shows a probe's stored results. Every field has a default: a probe that declares nothing
    still gets its answer (the summary's figures), its tables in the report, compare on its jobs' wall time."""

    headline: Callable[[list[dict[str, Any]]], str] | None = None
    """The findings' one line over the answer rows of every host and checkpoint; None: the count of rows."""
    compare: tuple[tuple[str, str], ...] = ()
    """(table, metric) candidates of `labprobe compare`, the answer first: the first stored wins, else the
    jobs' `wall_s`. The table SUMMARY compares a figure of the jobs' summaries, ANSWER one of its answer's."""
    history_table: str | None = None
    """The table `labprobe history` follows when the probe wrote several and --table is not given."""
    plots: tuple[Plot, ...] = ()
    """The report's host-comparison plots, in this order."""
    sections: tuple[Section, ...] = ()
    """The report's sections of their own, in this order; their tables leave the report's "other tables"."""
    one_row_per_tokenizer: bool = False
    """The answer depends on a checkpoint only through its tokenizer: checkpoints of a host with identical
    figures are one row."""
    checks_are_answer: bool = False
    """The checks are the answer itself: shown per row even when all passed."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoredInput:
    """A Config field the probe's own command (`labprobe NAME --host H --<checkpoint_option> C`) fills with the
    newest ok job of another probe on that host and checkpoint, its tables as that probe's `--json` output."""

    field: str
    """The Config field given the file (its option is not offered by the command)."""
    probe: str
    tables: tuple[str, ...]
    flag: str | None = None
    """None: always read. Else the command's flag (`stack_from_store`) that asks for it instead of the field."""
    help: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeSpec:
    """One registry entry: everything the runner needs to know about a probe, by module path (imported only
    when used: registering costs no import)."""

    name: str
    module: str
    """Its `Config` dataclass and `run(config) -> ProbeResult`."""
    config: str | None = None
    """The module holding its `Config`, when that imports less than `module` does: a sweep's driver and
    `labprobe validate` check a plan through the Configs alone, so a probe module's torch is not paid for them.
    None: `module`'s."""
    settles: str
    """One line: what it settles (`labprobe probe --help`)."""
    answer: str | None = None
    """The answer module (QUESTION, TABLES, EXACT, RATIO_OF, figures); None: the summary's scalar figures."""
    present: str | None = None
    """The module holding PRESENTATION (a Presentation); None: the defaults."""
    gpu: bool = False
    """Needs a GPU for real numbers: the sweep places its jobs on idle GPU hosts."""
    slow_on_cpu: bool = False
    """Times a model step: `labprobe probe` warns before a model that is not tiny is timed on a CPU."""
    command: str | None = None
    """One-line help of `labprobe NAME`, its run priced from the store's results (`stored_inputs`); None: none."""
    checkpoint_option: str = "checkpoint"
    """The command's option naming the stored inputs' checkpoint (`--profile-checkpoint`)."""
    stored_inputs: tuple[StoredInput, ...] = ()

    def __post_init__(self):
        if not self.name.isidentifier():  # tables are stored as `<probe>.<table>`: no dot, no space
            raise ValueError(f"ProbeSpec.name must be a Python identifier, got {self.name!r}")


def _builtin(name: str, settles: str, **kw) -> ProbeSpec:
    package = f"probes.{name}"
    return ProbeSpec(
        name=name,
        module=f"{package}.probe",
        config=f"{package}.config",
        settles=settles,
        answer=f"{package}.answer",
        present=f"{package}.present",
        **kw,
    )


REGISTRY: dict[str, ProbeSpec] = {
    spec.name: spec
    for spec in (
        _builtin("mask", "per-layer attention masks: SDPA fast path, sliding band, packed leaks (config only)"),
        _builtin("padding", "length distribution, padding waste per batching strategy, CE chunk sizing"),
        _builtin("bucket", "length-bucketing gain over a bucket-size sweep, source diversity per batch"),
        _builtin(
            "carrier",
            "training throughput of a model family: params, s/step, tok/s, MFU (GPU)",
            gpu=True,
            slow_on_cpu=True,
        ),
        _builtin(
            "profile",
            "step-time scaling fit, padding penalty, CE wall clock, kernel table (GPU)",
            gpu=True,
            slow_on_cpu=True,
        ),
        _builtin(
            "goodput",
            "epoch time, real tokens/s and budget hours per batching strategy, from a profile fit",
            command="goodput and budget hours of a corpus from a host's stored profile",
            checkpoint_option="profile-checkpoint",
            stored_inputs=(
                StoredInput(field="profile", probe="profile", tables=("fit", "scaling", "padding_penalty")),
                StoredInput(
                    field="stack_json",
                    probe="carrier",
                    tables=("carriers", "numerics"),
                    flag="stack_from_store",
                    help="price with a stack's measured step from the newest ok carrier of the checkpoint on the "
                    "host (--stack names the row; unset: the fastest measured ok), instead of --stack-json FILE",
                ),
            ),
        ),
        _builtin(
            "replay",
            "a corpus's real batch shapes run through the harness: measured vs predicted (GPU)",
            gpu=True,
            slow_on_cpu=True,
        ),
    )
}
"""name -> its spec, in the order answers and report sections are shown when no plan gives one."""

GPU_PROBES = frozenset(name for name, spec in REGISTRY.items() if spec.gpu)
"""Probes that need a GPU to give real numbers; the runner places these on idle GPU hosts (kept by `register`)."""

ENV_PROBES = "LABPROBE_PROBES"
"""Comma-separated modules, each with `SPEC = ProbeSpec(...)`, registered when `probes` is first imported."""


def register(spec: ProbeSpec) -> None:
    """Add a probe to the registry (a name already taken is an error: one name, one probe)."""
    global GPU_PROBES
    if not isinstance(spec, ProbeSpec):
        raise TypeError(f"register takes a ProbeSpec, got {type(spec).__name__}")
    if spec.name in REGISTRY:
        raise ValueError(f"probe {spec.name!r} is registered already (by {REGISTRY[spec.name].module})")
    REGISTRY[spec.name] = spec
    GPU_PROBES = frozenset(name for name, s in REGISTRY.items() if s.gpu)


def unregister(name: str) -> None:
    """Remove a probe `register` added (tests put the registry back as they found it)."""
    global GPU_PROBES
    del REGISTRY[name]
    GPU_PROBES = frozenset(n for n, s in REGISTRY.items() if s.gpu)


def get(name: str) -> ModuleType:
    if name not in REGISTRY:
        raise InputError(f"unknown probe {name!r} (known: {', '.join(REGISTRY)})")
    return importlib.import_module(REGISTRY[name].module)


def config_class(name: str) -> type:
    """The probe's Config class, from its `config` module where it names one (no probe module imported)."""
    if name not in REGISTRY:
        raise InputError(f"unknown probe {name!r} (known: {', '.join(REGISTRY)})")
    spec = REGISTRY[name]
    return importlib.import_module(spec.config or spec.module).Config


def answer(name: str) -> ModuleType | None:
    """The probe's answer module (QUESTION, TABLES, EXACT, RATIO_OF, figures), or None if it has none."""
    spec = REGISTRY.get(name)
    return importlib.import_module(spec.answer) if spec is not None and spec.answer else None


def presentation(name: str) -> Presentation:
    """How the runner shows the probe (the defaults for a probe that declares nothing, or one not registered:
    rows of a probe since removed are still shown)."""
    spec = REGISTRY.get(name)
    if spec is None or spec.present is None:
        return Presentation()
    found = importlib.import_module(spec.present).PRESENTATION
    assert isinstance(found, Presentation), f"{spec.present}.PRESENTATION is not a Presentation"
    return found


def run(name: str, **fields) -> ProbeResult:
    """Build the probe's Config from keyword fields and run it inline."""
    module = get(name)
    return module.run(module.Config(**fields))


def _register_from_env() -> None:
    for module in filter(None, (m.strip() for m in os.environ.get(ENV_PROBES, "").split(","))):
        spec = importlib.import_module(module).SPEC  # an ImportError says itself: the hook named a module
        if REGISTRY.get(spec.name) != spec:  # importing `probes` twice (a reload) registers nothing twice
            register(spec)


_register_from_env()
