"""The `cluster.yaml` schema: the lab's hosts, checkpoints, corpora, named sweep plans, the schedule.

Validated at the edge, once, with pydantic v2. Every model forbids unknown keys, so a typo is an
error rather than a silently ignored setting. Errors name the key path, one line each:

    cluster.yaml: plans.demo[2].checkpoints[0]: unknown checkpoint 'qwen9'

Relative paths (the store root, host roots, checkpoint and corpus paths) are resolved against the
directory holding the yaml, so the file means the same thing from any working directory.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

import probes
from probes.result import SHOWN_CHARS, FieldError, InputError, shown
from runner.clock import parse_hh_mm
from runner.lab.budget import BudgetSpec, with_budget
from runner.lab.names import control_characters, is_safe_name, path_name_errors, plan_name_errors, refuse_control
from runner.lab.probe_config import build_probe_config, field_error_line
from runner.lab.safe_yaml import read_yaml
from runner.lab.store_spec import StoreSpec
from runner.store.root import is_url

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""Checkpoint and corpus names become Parquet partition values: keep them plain."""
HOST_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
"""Host names are also Ray label values (`labprobe.host=<name>`): what Ray's label check accepts
(at most 63 characters, alphanumeric at both ends), so `ray start --labels` never refuses one."""

Problem = tuple[str | None, str]
"""(key path, message) of one problem in a cluster file; the key is None for the file as a whole."""


class ClusterError(InputError):
    """A broken cluster file. `problems` holds every problem found; `errors` the same, one line each."""

    def __init__(self, file: str, problems: list[Problem]):
        self.file, self.problems = file, problems
        self.errors = [f"{file}: {key}: {msg}" if key else f"{file}: {msg}" for key, msg in problems]
        more = f" (and {len(problems) - 1} more: labprobe validate lists them)" if len(problems) > 1 else ""
        super().__init__(self.errors[0] + more)


def _keyed(lines: list[str]) -> list[Problem]:
    """`key: message` lines (as every check below writes them) as problems."""
    return [(key, msg) for key, msg in (line.split(": ", 1) for line in lines)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RaySpec(_Model):
    address: str | None = None
    """Address `labprobe sweep` connects to (`host:port` or `auto`); unset: an embedded local Ray."""
    head: str | None = None
    """The host that runs the Ray head (`labprobe host-command`); unset: the first host."""
    port: int = Field(6379, ge=1, le=65535)
    """The head's GCS port."""

    @field_validator("address", "head")
    @classmethod
    def _one_line(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _no_control(value, f"ray {info.field_name}")


def _no_control(value: str | None, where: str) -> str | None:
    """`value`, or a ValueError when it holds a control character (or, for an address, blanks)."""
    if value is None:
        return value
    bad = control_characters(value)
    if bad:
        raise ValueError(f"{where}: holds control characters ({' '.join(bad)}), refused")
    if where.endswith("address") and value.split() != [value]:
        raise ValueError(f"{where}: expected a host name or IP address, without blanks")
    return value


class IdleThresholds(_Model):
    """Per-host overrides of the GPU idleness thresholds (runner.gpu.idle); unset: its defaults."""

    max_util_pct: float | None = Field(None, gt=0, le=100)
    """Busy at or above this utilisation: 0 would read every card busy, so it is refused."""
    max_mem_used_mib: float | None = Field(None, gt=0)
    """Busy at or above this much memory used by others: 0 would read every card busy, so it is refused."""
    window_s: float | None = Field(None, gt=0)
    runs_quiet_min: float | None = Field(None, ge=0)


class Host(_Model):
    name: str = Field(pattern=HOST_PATTERN)
    address: str
    gpus: int = Field(0, ge=0)
    checkpoints_root: str | None = None
    corpora_root: str | None = None
    runs_root: str | None = None
    """Where training runs write on this host: fresh files there mean a GPU is in use."""
    idle: IdleThresholds | None = None

    @field_validator("address", "checkpoints_root", "corpora_root", "runs_root")
    @classmethod
    def _one_line(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A newline, tab, NUL or escape in an address would split or garble `host-command`'s line (and a
        root's, the purge's and sweep's messages): refused, naming the host."""
        return _no_control(value, f"host {shown(info.data.get('name', '?'))} {info.field_name}")


class Checkpoint(_Model):
    name: str = Field(pattern=NAME_PATTERN)
    path: str
    """Absolute, or relative to the host's checkpoints_root (else to the cluster file's directory)."""
    hosts: dict[str, str] = {}
    """Per-host paths overriding `path`."""
    weights: Literal["random", "local"] = "random"
    """random: build the architecture from config.json; local: load the weight files on the host."""


class Corpus(_Model):
    name: str = Field(pattern=NAME_PATTERN)
    path: str
    """A JSONL corpus; absolute, or relative to the host's corpora_root (else the file's directory)."""
    tokenizer: str | None = None
    """A tokenizer directory, resolved like `path`; unset: the checkpoint's own directory."""
    hosts: dict[str, str] = {}
    """Per-host corpus paths overriding `path`."""


class PlanEntry(_Model):
    probe: str
    checkpoints: list[str] | Literal["all"] = "all"
    hosts: list[str] | Literal["all"] = "all"
    corpus: str | None = None
    config: dict[str, Any] = {}
    """The probe's Config fields (not the ones the runner fills: checkpoint, corpus, tokenizer, weights)."""


class Schedule(_Model):
    plan: str
    cron: str
    deadline: str | None = None
    log: str | None = None

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from crontab import (
            CronSlices,  # the parser `schedule install` writes the entry with
        )

        if not CronSlices.is_valid(value):
            raise ValueError(f"invalid cron expression {shown(value)} (expected e.g. '0 1 * * *' or '@daily')")
        return value

    @field_validator("log")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        refused = refuse_control("path", value) if value is not None else None
        if refused:
            raise ValueError(refused.split(": ", 1)[1])
        return value

    @field_validator("deadline", mode="before")
    @classmethod
    def _unquoted(cls, value):
        # YAML 1.1 reads an unquoted 22:30 as the base-60 integer 1350 (07:00 stays a string)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 24 * 60:
            raise ValueError(
                f"YAML read an unquoted HH:MM as the number {value}: "
                f'quote it, deadline: "{value // 60:02d}:{value % 60:02d}"'
            )
        return value

    @field_validator("deadline")
    @classmethod
    def _hh_mm(cls, value: str | None) -> str | None:
        if value is not None:
            parse_hh_mm(value)  # its ValueError becomes pydantic's error at `schedule.deadline`
        return value


class ClusterSpec(_Model):
    store: StoreSpec = StoreSpec()
    ray: RaySpec = RaySpec()
    budget: BudgetSpec | None = None
    hosts: list[Host] = Field(min_length=1)
    checkpoints: list[Checkpoint] = []
    corpora: list[Corpus] = []
    plans: dict[str, list[PlanEntry]] = {}
    schedule: Schedule | None = None


@dataclasses.dataclass(frozen=True)
class Cluster:
    """A validated cluster file, with lookups by name and path resolution."""

    spec: ClusterSpec
    path: Path
    """The cluster file itself (absolute); relative paths resolve against its directory."""

    @property
    def base(self) -> Path:
        return self.path.parent

    @property
    def hosts(self) -> dict[str, Host]:
        return {h.name: h for h in self.spec.hosts}

    @property
    def checkpoints(self) -> dict[str, Checkpoint]:
        return {c.name: c for c in self.spec.checkpoints}

    @property
    def corpora(self) -> dict[str, Corpus]:
        return {c.name: c for c in self.spec.corpora}

    def store_root(self) -> Path | str:
        return self.spec.store.location(self.base)

    def head(self) -> Host:
        return self.hosts[self.spec.ray.head] if self.spec.ray.head else self.spec.hosts[0]

    def _here(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.base / p).resolve()

    def _path_on_host(self, path: str, root: str | None) -> str:
        """`path` as the host sees it: absolute stays; relative joins `root` (the host's checkpoints or
        corpora root, itself relative to the cluster file's directory), else the cluster file's directory."""
        p = Path(path).expanduser()
        if p.is_absolute():
            return str(p)
        return str(self._here(root) / p if root else self._here(path))

    def checkpoint_path(self, checkpoint: str, host: str) -> str:
        """Where `checkpoint` lives on `host` (a path string on that host; not checked here)."""
        ckpt, h = self.checkpoints[checkpoint], self.hosts[host]
        if host in ckpt.hosts:
            return self._path_on_host(ckpt.hosts[host], h.checkpoints_root)
        return self._path_on_host(ckpt.path, h.checkpoints_root)

    def corpus_paths(self, corpus: str, host: str) -> tuple[str, str | None]:
        """(corpus file, tokenizer dir or None) on `host`."""
        c, h = self.corpora[corpus], self.hosts[host]
        path = self._path_on_host(c.hosts.get(host, c.path), h.corpora_root)
        tokenizer = self._path_on_host(c.tokenizer, h.corpora_root) if c.tokenizer else None
        return path, tokenizer

    def runs_dir(self, host: str) -> str | None:
        root = self.hosts[host].runs_root
        return self._path_on_host(root, None) if root else None


def load_cluster(path: str | Path, *, configs: bool = True) -> Cluster:
    """Read and validate a cluster file; raise ClusterError listing every problem (key paths).
    `configs=False`: plan entries' probe configs are not built (their names are still checked):
    for commands that read the store and never run a plan (compare, history, report), so they do
    not import the probes, and torch with them (about 1.2 s)."""
    path = Path(path)
    name = path.name
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise InputError(f"{name}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        spec = ClusterSpec.model_validate(raw)
    except ValidationError as exc:
        raise ClusterError(name, _pydantic_problems(exc)) from None
    problems = _keyed(check_references(spec, configs=configs))
    if problems:
        raise ClusterError(name, problems)
    cluster = Cluster(spec=spec, path=path.resolve())
    problems = _keyed(_path_name_errors(cluster))
    if problems:
        raise ClusterError(name, problems)
    return cluster


def _path_name_errors(cluster: Cluster) -> list[str]:
    """Names the store's filesystem would refuse as file names, before any job runs (runner.lab.names)."""
    spec = cluster.spec
    local = not is_url(spec.store.root)
    return path_name_errors(
        cluster.store_root() if local else Path("."),
        local=local,
        checkpoints=[c.name for c in spec.checkpoints],
        hosts=[h.name for h in spec.hosts],
        plans=list(spec.plans),
    )


def key_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        part = part if isinstance(part, int) else str(part)[:SHOWN_CHARS]  # a key can be megabytes long
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "(top level)"


def _pydantic_problems(exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if p not in ("list[str]", "literal['all']"))
        if err["type"] == "extra_forbidden":
            problems.append(
                (key_path(loc[:-1]), f"unknown key {shown(loc[-1])}")
                if len(loc) > 1
                else (None, f"unknown top-level key {shown(loc[-1])}")
            )
        elif err["type"] == "missing":
            problems.append((key_path(loc), "required key is missing"))
        else:
            got = err.get("input")
            quoted = "" if isinstance(got, (dict, list)) else f" (got {shown(got)})"
            problems.append((key_path(loc), f"{err['msg']}{quoted}"))
    return list(dict.fromkeys(problems))  # a union reports one problem per branch


def _duplicates(items: list, kind: str, section: str) -> list[str]:
    seen: set[str] = set()
    errors = []
    for i, item in enumerate(items):
        if item.name in seen:
            errors.append(f"{section}[{i}].name: duplicate {kind} {shown(item.name)}")
        seen.add(item.name)
    return errors


def check_references(spec: ClusterSpec, *, configs: bool = True) -> list[str]:
    """Cross-references pydantic cannot see: duplicate names, plans naming unknown things, configs."""
    errors = (
        plan_name_errors(list(spec.plans))
        + _duplicates(spec.hosts, "host", "hosts")
        + _duplicates(spec.checkpoints, "checkpoint", "checkpoints")
        + _duplicates(spec.corpora, "corpus", "corpora")
    )
    hosts = {h.name for h in spec.hosts}
    if spec.ray.head is not None and spec.ray.head not in hosts:
        errors.append(f"ray.head: unknown host {shown(spec.ray.head)}")
    for section, items in (("checkpoints", spec.checkpoints), ("corpora", spec.corpora)):
        for i, item in enumerate(items):
            errors += [
                f"{section}[{i}].hosts.{h[:SHOWN_CHARS]}: unknown host {shown(h)}" for h in item.hosts if h not in hosts
            ]
    if spec.budget is not None:
        known = {c.name for c in spec.checkpoints}
        errors += [
            f"budget.arms[{i}]: unknown checkpoint {shown(name)}"
            for i, name in enumerate(spec.budget.arm_checkpoints)
            if name not in known
        ]
    for plan, entries in spec.plans.items():
        for i, entry in enumerate(entries if is_safe_name(plan) else []):  # an unsafe name: said once, above
            errors += _check_entry(spec, f"plans.{plan}[{i}]", entry, configs=configs)
    if spec.schedule is not None and spec.schedule.plan not in spec.plans:
        errors.append(
            f"schedule.plan: unknown plan {shown(spec.schedule.plan)} (plans: {', '.join(spec.plans) or 'none'})"
        )
    return errors


def _check_entry(spec: ClusterSpec, where: str, entry: PlanEntry, *, configs: bool = True) -> list[str]:
    errors = []
    known = {"hosts": {h.name for h in spec.hosts}, "checkpoints": {c.name for c in spec.checkpoints}}
    for key, kind in (("hosts", "host"), ("checkpoints", "checkpoint")):
        names = getattr(entry, key)
        if names != "all":
            errors += [
                f"{where}.{key}[{j}]: unknown {kind} {shown(n)}" for j, n in enumerate(names) if n not in known[key]
            ]
    if entry.corpus is not None and entry.corpus not in {c.name for c in spec.corpora}:
        errors.append(f"{where}.corpus: unknown corpus {shown(entry.corpus)}")
    if entry.probe not in probes.REGISTRY:
        return errors + [f"{where}.probe: unknown probe {shown(entry.probe)} (known: {', '.join(probes.REGISTRY)})"]
    if not configs:
        return errors
    try:
        build_probe_config(
            entry.probe, with_budget(spec.budget, entry.probe, entry.config), placeholders=True, corpus=entry.corpus
        )
    except FieldError as exc:
        errors.append(field_error_line(where, entry.config, exc))
    except InputError as exc:
        errors.append(f"{where}: {' '.join(str(exc).split())}")
    return errors
