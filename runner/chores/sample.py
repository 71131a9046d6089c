"""Load the demo's recorded sample of real GPU results (demo/recorded/carrier_h200.json, built by
demo/make_sample.py from benchmarks/results/) into a store, so `compare`, `history` and the report
show a host comparison on a machine without a GPU.

Each recorded job is stored as a sweep would store it (its table rows, then its job row), with run
ids `recorded-...`, code_version `recorded`, plan `recorded`, and its source file, date and machine
in the job's env (`recorded`), so nothing recorded reads as measured here. Loading twice adds nothing.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path

from runner.store.fingerprint import fingerprint
from runner.store.rows import JobKey
from runner.store.store import Store

SAMPLE = Path(__file__).resolve().parents[2] / "demo" / "recorded" / "carrier_h200.json"
CHECKPOINTS = SAMPLE.parents[1] / "checkpoints"


def load_sample(store: Store, path: Path = SAMPLE) -> tuple[int, int]:
    """-> (jobs stored now, jobs already there)."""
    sample = json.loads(path.read_text())
    if store.local:  # readers refuse a store that does not exist; this one is made here
        Path(store.root).mkdir(parents=True, exist_ok=True)
    have = store.jobs(columns=["run_id", "job_id"])
    stored = set() if have.empty else set(zip(have["run_id"], have["job_id"], strict=True))
    added = 0
    for job in sample["runs"]:
        key = _key(sample["probe"], job)
        if (key.run_id, key.job_id) in stored:
            continue
        store.write_table(key, sample["table"], job["rows"])
        store.write_job(
            key,
            status="ok",
            started_at=key.finished_at,
            wall_s=0.0,
            summary={"recorded": job["source"]},
            config=job["config"],
            env={**job["env"], "recorded": f"{job['source']}, {job['finished_at']}"},
            plan="recorded",
        )
        added += 1
    return added, len(sample["runs"]) - added


def _key(probe: str, job: dict) -> JobKey:
    config_hash = _sha(json.dumps(job["config"], sort_keys=True))
    fp = fingerprint(CHECKPOINTS / job["checkpoint"])  # the demo's copy: the same config.json as the run's
    return JobKey(
        run_id=job["run"],
        job_id=_sha(json.dumps([probe, config_hash, fp, job["host"], job["checkpoint"]])),
        probe=probe,
        host=job["host"],
        checkpoint=job["checkpoint"],
        checkpoint_fp=fp,
        config_hash=config_hash,
        code_version="recorded",
        finished_at=datetime.fromisoformat(job["finished_at"]),
    )


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
