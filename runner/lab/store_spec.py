"""The `store:` block of cluster.yaml: where the store lives and how it is kept."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from runner.store.root import is_url


class StoreSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str = "./results"
    """The store's root: a directory (relative to the cluster file's directory) or an object-store
    URL delta-rs supports (`s3://bucket/labprobe`, `gs://...`, `az://...`, `abfss://...`)."""
    storage_options: dict[str, str] = {}
    """For a URL root: delta-rs storage options (region, endpoint, credentials; e.g. `aws_region`,
    or `aws_conditional_put: etag` for safe concurrent commits on S3). Options not given here come
    from the environment (AWS_*, GOOGLE_*, AZURE_* variables), as delta-rs reads them."""
    vacuum_retention_days: float = Field(7.0, ge=0)
    """Every sweep ends by vacuuming (after its compaction), as `labprobe store vacuum` does: files
    replaced longer ago than N days are deleted; every file a table version of the last N days needs
    is kept: N days of time travel, and of safety for a reader that opened an older version."""

    def location(self, base: Path) -> Path | str:
        """The root: a URL as written, a path resolved against `base` (the cluster file's directory)."""
        if is_url(self.root):
            return self.root
        path = Path(self.root.removeprefix("file://")).expanduser()
        return path if path.is_absolute() else (base / path).resolve()
