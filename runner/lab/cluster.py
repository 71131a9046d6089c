"""The `cluster.yaml` schema: the lab's hosts, checkpoints, corpora, named sweep plans, the schedule.

Validated at the edge, once, with pydantic v2. Every model forbids unknown keys, so a typo is an
error rather than a silently ignored setting. Errors name the key path, one line each:

    cluster.yaml: plans.demo[2].checkpoints[0]: unknown checkpoint 'qwen9'

Relative paths (the store root, host roots, checkpoint and corpus paths) are resolved against the
directory holding the yaml, so the file means the same thing from any working directory.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)

import probes
from probes.result import InputError
from runner.clock import parse_hh_mm
from runner.lab.budget import BudgetSpec, with_budget

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""Checkpoint and corpus names become Parquet partition values: keep them plain."""
HOST_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
"""Host names are also Ray label values (`labprobe.host=<name>`): what Ray's label check accepts
(at most 63 characters, alphanumeric at both ends), so `ray start --labels` never refuses one."""

RUNNER_FIELDS = ("checkpoint", "corpus", "tokenizer", "weights")
"""Probe Config fields the runner fills per job from the cluster file; a plan's `config` may not set them."""


class ClusterError(InputError):
    """A broken cluster file. `errors` holds every problem found, one line each."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        more = f" (and {len(errors) - 1} more: labprobe validate lists them)" if len(errors) > 1 else ""
        super().__init__(errors[0] + more)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StoreSpec(_Model):
    root: str = "./results"
    """The store's root directory; relative to the cluster file's directory."""


class RaySpec(_Model):
    address: str | None = None
    """Address `labprobe sweep` connects to (`host:port` or `auto`); unset: an embedded local Ray."""
    head: str | None = None
    """The host that runs the Ray head (`labprobe host-command`); unset: the first host."""
    port: int = Field(6379, ge=1, le=65535)
    """The head's GCS port."""


class IdleThresholds(_Model):
    """Per-host overrides of the GPU idleness thresholds (runner/gpu/idle.py); unset: its defaults."""
    max_util_pct: float | None = Field(None, ge=0, le=100)
    max_mem_used_mib: float | None = Field(None, ge=0)
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
            raise ValueError(f"invalid cron expression {value!r} (expected e.g. '0 1 * * *' or '@daily')")
        return value

    @field_validator("deadline", mode="before")
    @classmethod
    def _unquoted(cls, value):
        # YAML 1.1 reads an unquoted 22:30 as the base-60 integer 1350 (07:00 stays a string)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 24 * 60:
            raise ValueError(f"YAML read an unquoted HH:MM as the number {value}: "
                             f"quote it, deadline: \"{value // 60:02d}:{value % 60:02d}\"")
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

    def store_root(self) -> Path:
        return self._here(self.spec.store.root)

    def head(self) -> Host:
        return self.hosts[self.spec.ray.head] if self.spec.ray.head else self.spec.hosts[0]

    def _here(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.base / p).resolve()

    def _on_host(self, path: str, root: str | None) -> str:
        p = Path(path).expanduser()
        if p.is_absolute():
            return str(p)
        return str(self._here(root) / p if root else self._here(path))

    def checkpoint_path(self, checkpoint: str, host: str) -> str:
        """Where `checkpoint` lives on `host` (a path string on that host; not checked here)."""
        ckpt, h = self.checkpoints[checkpoint], self.hosts[host]
        if host in ckpt.hosts:
            return self._on_host(ckpt.hosts[host], h.checkpoints_root)
        return self._on_host(ckpt.path, h.checkpoints_root)

    def corpus_paths(self, corpus: str, host: str) -> tuple[str, str | None]:
        """(corpus file, tokenizer dir or None) on `host`."""
        c, h = self.corpora[corpus], self.hosts[host]
        path = self._on_host(c.hosts.get(host, c.path), h.corpora_root)
        tokenizer = self._on_host(c.tokenizer, h.corpora_root) if c.tokenizer else None
        return path, tokenizer

    def runs_dir(self, host: str) -> str | None:
        root = self.hosts[host].runs_root
        return self._on_host(root, None) if root else None


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster file; raise ClusterError listing every problem (key paths)."""
    path = Path(path)
    name = path.name
    if not path.is_file():
        raise InputError(f"{path}: no such cluster file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start:exc.start + 1]
        raise InputError(f"{name}: not UTF-8 text (byte {exc.start}: {bad!r})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the cluster file: {exc.strerror or exc}") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise InputError(f"{name}: malformed YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{name}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        spec = ClusterSpec.model_validate(raw)
    except ValidationError as exc:
        raise ClusterError([f"{name}: {line}" for line in _pydantic_lines(exc)]) from None
    errors = [f"{name}: {line}" for line in check_references(spec)]
    if errors:
        raise ClusterError(errors)
    return Cluster(spec=spec, path=path.resolve())


def key_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _pydantic_lines(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if p not in ("list[str]", "literal['all']"))
        if err["type"] == "extra_forbidden":
            lines.append(f"{key_path(loc[:-1])}: unknown key {loc[-1]!r}" if len(loc) > 1
                         else f"unknown top-level key {loc[-1]!r}")
        elif err["type"] == "missing":
            lines.append(f"{key_path(loc)}: required key is missing")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
            lines.append(f"{key_path(loc)}: {err['msg']}{shown}")
    return list(dict.fromkeys(lines))  # a union reports one problem per branch


def _duplicates(items: list, kind: str, section: str) -> list[str]:
    seen: set[str] = set()
    errors = []
    for i, item in enumerate(items):
        if item.name in seen:
            errors.append(f"{section}[{i}].name: duplicate {kind} {item.name!r}")
        seen.add(item.name)
    return errors


def check_references(spec: ClusterSpec) -> list[str]:
    """Cross-references pydantic cannot see: duplicate names, plans naming unknown things, configs."""
    errors = (_duplicates(spec.hosts, "host", "hosts") + _duplicates(spec.checkpoints, "checkpoint", "checkpoints")
              + _duplicates(spec.corpora, "corpus", "corpora"))
    hosts = {h.name for h in spec.hosts}
    if spec.ray.head is not None and spec.ray.head not in hosts:
        errors.append(f"ray.head: unknown host {spec.ray.head!r}")
    for section, items in (("checkpoints", spec.checkpoints), ("corpora", spec.corpora)):
        for i, item in enumerate(items):
            errors += [f"{section}[{i}].hosts.{h}: unknown host {h!r}" for h in item.hosts if h not in hosts]
    for plan, entries in spec.plans.items():
        for i, entry in enumerate(entries):
            errors += _check_entry(spec, f"plans.{plan}[{i}]", entry)
    if spec.schedule is not None and spec.schedule.plan not in spec.plans:
        errors.append(f"schedule.plan: unknown plan {spec.schedule.plan!r} (plans: {', '.join(spec.plans) or 'none'})")
    return errors


def _check_entry(spec: ClusterSpec, where: str, entry: PlanEntry) -> list[str]:
    errors = []
    known = {"hosts": {h.name for h in spec.hosts}, "checkpoints": {c.name for c in spec.checkpoints}}
    for key, kind in (("hosts", "host"), ("checkpoints", "checkpoint")):
        names = getattr(entry, key)
        if names != "all":
            errors += [f"{where}.{key}[{j}]: unknown {kind} {n!r}" for j, n in enumerate(names)
                       if n not in known[key]]
    if entry.corpus is not None and entry.corpus not in {c.name for c in spec.corpora}:
        errors.append(f"{where}.corpus: unknown corpus {entry.corpus!r}")
    if entry.probe not in probes.REGISTRY:
        return errors + [f"{where}.probe: unknown probe {entry.probe!r} (known: {', '.join(probes.REGISTRY)})"]
    try:
        build_probe_config(entry.probe, with_budget(spec.budget, entry.probe, entry.config), placeholders=True,
                           corpus=entry.corpus)
    except ConfigFieldError as exc:
        errors.append(f"{where}.config{'.' + exc.field if exc.field else ''}: {exc.message}")
    return errors


class ConfigFieldError(InputError):
    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}" if field else message)


def build_probe_config(probe: str, config: dict[str, Any], *, placeholders: bool = False,
                       corpus: str | None = None, filled: dict[str, Any] | None = None) -> Any:
    """The probe's Config from a plan's `config` plus the runner-filled fields.

    With `placeholders`, the runner fields get stand-in paths: this checks a plan without touching
    any host (`labprobe validate`). Field values are type-checked against the Config's annotations
    (pydantic's TypeAdapter), so `seq_len: abc` is an error naming the field, not a crash later.
    """
    cls = probes.get(probe).Config
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in config.items():
        if key not in fields:
            raise ConfigFieldError(key, f"unknown field for probe {probe!r} (fields: {', '.join(fields)})")
        if key in RUNNER_FIELDS:
            raise ConfigFieldError(key, "set by the runner from the plan's checkpoints/corpus; remove it here")
        try:
            values[key] = TypeAdapter(hints[key]).validate_python(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ConfigFieldError(key, f"{err['msg']} (got {value!r})") from None
    runner = filled if filled is not None else _placeholders(corpus) if placeholders else {}
    for key, value in runner.items():
        if key in fields:
            values[key] = TypeAdapter(hints[key]).validate_python(_runner_value(key, value, hints[key]))
    missing = [k for k in RUNNER_FIELDS if k in fields and k not in values and _required(fields[k])]
    if missing:
        raise ConfigFieldError("", f"probe {probe!r} needs {', '.join(missing)}: name a corpus in the entry")
    try:
        return cls(**values)
    except (InputError, TypeError, ValueError) as exc:
        raise ConfigFieldError("", " ".join(str(exc).split())) from None


def _runner_value(key: str, value: Any, hint: Any) -> Any:
    """A runner-filled value in the probe's terms: a family probe (`checkpoint: tuple[Path, ...]`)
    gets a one-checkpoint family; the probes call local weights "checkpoint"."""
    if typing.get_origin(hint) is tuple and not isinstance(value, (tuple, list)):
        return (value,)
    if key == "weights" and value == "local":
        return "checkpoint"
    return value


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _placeholders(corpus: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"checkpoint": Path("checkpoint"), "tokenizer": Path("tokenizer"), "weights": "random"}
    if corpus is not None:
        out["corpus"] = Path("corpus.jsonl")
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a lab file with two `hosts:` is an error."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:  # `? [a, b]`: a list as a key; `key in seen` would raise a bare TypeError
                raise yaml.constructor.ConstructorError(
                    None, None, f"a {type(key).__name__} cannot be a key", key_node.start_mark) from None
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
