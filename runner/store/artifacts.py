"""Raw evidence (the unedited profiler table, the timings) as plain files beside the tables:
`<root>/artifacts/<job_id>/<run_id>/<name>`. Written once, never rewritten."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs as pa_fs

from runner.store.delta import StoreError


def write(store, job_id: str, run_id: str, files: dict[str, str]) -> str:
    """Write `files` (name -> text) of one job's run; -> their folder."""
    for name in files:
        assert "/" not in name and not name.startswith("."), f"bad artifact name {name!r}"
    rel = store.place.artifacts(job_id, run_id)
    if not store.local:
        return _write_remote(store.place, rel, files)
    folder = store.root / rel
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = folder / name
        if path.exists():
            raise StoreError(f"{path}: already stored; the store never rewrites a file")
        tmp = folder / f".{name}.tmp-{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        _publish(tmp, path)
    return str(folder)


def _write_remote(place, folder: str, files: dict[str, str]) -> str:
    # An object store's put is atomic (the object appears whole or not at all).
    fs = place.filesystem()
    for name, text in files.items():
        if fs.get_file_info(f"{folder}/{name}").type != pa_fs.FileType.NotFound:
            raise StoreError(f"{place.join(folder, name)}: already stored; the store never rewrites a file")
        place.write_text(f"{folder}/{name}", text)
    return place.join(folder)


def _publish(tmp: Path, path: Path) -> None:
    """Move a finished temp file into place, failing (never overwriting) if `path` appeared meanwhile."""
    try:
        os.link(tmp, path)  # unlike rename, link refuses an existing target
    except FileExistsError:
        tmp.unlink()
        raise StoreError(f"{path}: already stored; the store never rewrites a file") from None
    except OSError:  # a filesystem without hard links: rename, after the check in the caller
        os.replace(tmp, path)
        return
    tmp.unlink()
