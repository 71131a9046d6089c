"""Plan expansion: a named plan of cluster.yaml becomes jobs, probe x checkpoint x host x config.

A job's identity, `job_id`, is a stable hash of the probe, its config (`config_hash`), the
checkpoint's fingerprint and the host (and the checkpoint's name, under which the store files it). The fingerprint is a content hash computed ON the host
(runner.store.fingerprint), so:
- the same checkpoint at different paths on two hosts has one fingerprint, and its jobs differ
  only by host; a retrained checkpoint under the old name gets new job ids and is measured again;
- deciding what is already done needs the fingerprints before dispatch. The sweep gets them with
  one cheap pinned task per host (all of that host's checkpoints in one task, a few stat calls;
  ~10 ms warm) rather than a plan-level key that would miss a checkpoint changed in place. The job
  recomputes the fingerprint when it starts and stores the one it saw.

`config_hash` covers the probe's full Config with defaults (a changed default is a changed
measurement), with the runner-filled paths replaced by the names they came from: host paths differ
per host but mean the same checkpoint and corpus.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import probes
from probes.result import InputError, config_to_dict
from runner.lab.budget import with_budget
from runner.lab.cluster import Cluster, PlanEntry
from runner.lab.probe_config import RUNNER_FIELDS, build_probe_config

DEFAULT_PLAN = "demo"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Job:
    plan: str
    entry: int
    """Index of the plan entry this job came from."""
    probe: str
    checkpoint: str
    host: str
    corpus: str | None
    config: dict[str, Any]
    """The entry's own config fields (type-checked); the runner adds the host paths at dispatch."""
    config_hash: str
    gpu: bool
    paths: dict[str, Any]
    """Runner-filled Config fields on the job's host: checkpoint, corpus, tokenizer, weights."""
    checkpoint_fp: str = ""
    job_id: str = ""

    def with_fingerprint(self, fp: str) -> Job:
        return dataclasses.replace(
            self, checkpoint_fp=fp, job_id=job_id(self.probe, self.config_hash, fp, self.host, self.checkpoint)
        )

    def probe_config(self) -> Any:
        """The probe's Config for this host (called on the host, inside the task)."""
        return build_probe_config(self.probe, self.config, filled=self.paths)


def job_id(probe: str, config_hash: str, checkpoint_fp: str, host: str, checkpoint: str) -> str:
    """The checkpoint's name joins its fingerprint: the store files rows under the name, so two
    names for one content (an alias) each get their rows rather than one being "already done"."""
    blob = json.dumps([probe, config_hash, checkpoint_fp, host, checkpoint]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _placeholder_config(entry: PlanEntry) -> dict[str, Any]:
    """The entry's Config with placeholder host paths, built (and validated) once per entry, as a dict."""
    return config_to_dict(build_probe_config(entry.probe, entry.config, placeholders=True, corpus=entry.corpus))


HASHED_AS_BEFORE = {"rows": ("full", None), "new_shape_s": (None, 0.0)}
"""Fields added or changed since jobs were stored, at the value that measures as before: hashed as before
(None: left out), so a sweep does not measure again what its store already holds (carrier's `rows` full is
the batch it always measured; goodput's `new_shape_s` unset is the 0 it was)."""


def plan_config_hash(entry: PlanEntry, built: dict[str, Any], checkpoint_weights: str) -> str:
    """`built` is _placeholder_config(entry): its runner fields give way to the names they came from."""
    fields = {k: v for k, v in built.items() if k not in RUNNER_FIELDS}
    for name, (now, before) in HASHED_AS_BEFORE.items():
        if name in fields and fields[name] == now:
            del fields[name]
            if before is not None:
                fields[name] = before
    fields["corpus"] = entry.corpus
    fields["weights"] = checkpoint_weights
    blob = json.dumps([entry.probe, fields], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def expand(cluster: Cluster, plan: str) -> list[Job]:
    """Every job of `plan`, without fingerprints (those come from the hosts). Runs nothing."""
    plans = cluster.spec.plans
    if plan not in plans:
        raise InputError(f"{cluster.path.name}: no plan {plan!r} (plans: {', '.join(plans) or 'none'})")
    jobs: list[Job] = []
    seen: set[tuple[str, str, str, str]] = set()  # an entry repeated in the plan is one job, not two
    for index, entry in enumerate(plans[plan]):
        entry = entry.model_copy(update={"config": with_budget(cluster.spec.budget, entry.probe, entry.config)})
        hosts = list(cluster.hosts) if entry.hosts == "all" else entry.hosts
        ckpts = list(cluster.checkpoints) if entry.checkpoints == "all" else entry.checkpoints
        built = _placeholder_config(entry)
        config = {k: built[k] for k in entry.config}  # the entry's own fields, typed
        for ckpt in ckpts:
            chash = plan_config_hash(entry, built, cluster.checkpoints[ckpt].weights)
            for host in hosts:
                if (entry.probe, ckpt, host, chash) in seen:
                    continue
                seen.add((entry.probe, ckpt, host, chash))
                jobs.append(
                    Job(
                        plan=plan,
                        entry=index,
                        probe=entry.probe,
                        checkpoint=ckpt,
                        host=host,
                        corpus=entry.corpus,
                        config=config,
                        config_hash=chash,
                        gpu=entry.probe in probes.GPU_PROBES,
                        paths=_host_paths(cluster, entry, ckpt, host),
                    )
                )
    return jobs


def _host_paths(cluster: Cluster, entry: PlanEntry, ckpt: str, host: str) -> dict[str, Any]:
    ckpt_path = cluster.checkpoint_path(ckpt, host)
    paths: dict[str, Any] = {
        "checkpoint": ckpt_path,
        "weights": cluster.checkpoints[ckpt].weights,
        "tokenizer": ckpt_path,
    }
    if entry.corpus is not None:
        corpus, tokenizer = cluster.corpus_paths(entry.corpus, host)
        paths["corpus"] = corpus
        if tokenizer is not None:
            paths["tokenizer"] = tokenizer
    return paths


def checkpoints_by_host(jobs: list[Job]) -> dict[str, dict[str, str]]:
    """host -> {checkpoint: path on that host}: what each host's fingerprint task reads."""
    out: dict[str, dict[str, str]] = {}
    for job in jobs:
        out.setdefault(job.host, {})[job.checkpoint] = job.paths["checkpoint"]
    return out
