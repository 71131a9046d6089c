"""How every command opens its store: one function, the same options, whatever the command.

The root is `--store` (a folder or an object-store URL such as `s3://bucket/labprobe`), else the
cluster file's `store.root`, else ./results. The storage options are the cluster file's
`store.storage_options` whenever there is a cluster file (also beside `--store`); what they leave
unset delta-rs takes from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, and the GOOGLE_*/AZURE_* ones), as the lock's client does
(runner.store.lease). runner.store.root.StoreRoot builds every path under the root.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from runner.store.root import StoreRoot
from runner.store.store import Store

if TYPE_CHECKING:
    from runner.lab.cluster import Cluster

DEFAULT_ROOT = "results"
STORE_HELP = (
    "the store: a folder or an object-store URL, s3://BUCKET/PREFIX (default: the cluster file's, else ./results)"
)


def add_store_option(parser: argparse.ArgumentParser) -> None:
    """--store as every command takes it: text, so a URL is kept as written."""
    parser.add_argument("--store", help=STORE_HELP)


def optional_cluster(path: str | Path | None, *, configs: bool = False) -> Cluster | None:
    """The cluster file at `path` (default ./cluster.yaml) when it exists, else None (the store is then
    --store or ./results, with the environment's storage options)."""
    path = Path(path or "cluster.yaml")
    if not path.is_file():
        return None
    from runner.lab.cluster import load_cluster

    return load_cluster(path, configs=configs)


def store_root(store: str | Path | None, cluster: Cluster | None) -> StoreRoot:
    """The store's root and storage options (see the module docstring)."""
    root = store if store is not None else cluster.store_root() if cluster is not None else DEFAULT_ROOT
    options = cluster.spec.store.storage_options if cluster is not None else {}
    return StoreRoot(root, options)


def open_store(store: str | Path | None, cluster: Cluster | None) -> Store:
    """The store a command reads or writes: `--store` (or None) and the cluster file (or None)."""
    return Store(store_root(store, cluster))
