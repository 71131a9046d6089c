"""cluster.yaml's `store:` block: a directory or an object-store URL, delta-rs options, the vacuum retention."""

from __future__ import annotations

import pytest
import yaml

from runner.lab.cluster import ClusterError, load_cluster
from runner.store.store import Store

HOSTS = [{"name": "gx10", "address": "gx10.lab"}]


def cluster(tmp_path, store: dict):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"store": store, "hosts": HOSTS}))
    return load_cluster(path)


def test_a_url_root_reaches_the_store_as_written_with_its_options(tmp_path):
    lab = cluster(
        tmp_path,
        {
            "root": "s3://lab-bucket/labprobe",
            "storage_options": {"aws_region": "eu-west-1"},
            "vacuum_retention_days": 30,
        },
    )
    assert lab.store_root() == "s3://lab-bucket/labprobe"
    store = Store(lab.store_root(), storage_options=dict(lab.spec.store.storage_options))
    assert (store.uri, store.local, store.storage_options) == (
        "s3://lab-bucket/labprobe",
        False,
        {"aws_region": "eu-west-1"},
    )
    assert lab.spec.store.vacuum_retention_days == 30


def test_a_path_root_resolves_against_the_cluster_file_and_defaults_hold(tmp_path):
    lab = cluster(tmp_path, {"root": "store"})
    assert lab.store_root() == tmp_path / "store"
    assert lab.spec.store.vacuum_retention_days == 7 and lab.spec.store.storage_options == {}
    assert cluster(tmp_path, {"root": f"file://{tmp_path}/x"}).store_root() == tmp_path / "x"


@pytest.mark.parametrize(
    "store, where",
    [
        ({"vacuum_retention_days": -1}, "store.vacuum_retention_days"),
        ({"retention": 7}, "store: unknown key 'retention'"),
        ({"storage_options": {"aws_region": 3}}, "store.storage_options"),
    ],
)
def test_a_bad_store_block_names_its_key(tmp_path, store, where):
    with pytest.raises(ClusterError) as info:
        cluster(tmp_path, store)
    assert where in str(info.value)
