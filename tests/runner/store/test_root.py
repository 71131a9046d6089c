"""runner.store.root: the one test of a URL, the paths under a root, and delta-rs' errors in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.lab.schedule import _log_path
from runner.store.root import StoreRoot, is_url, one_line


@pytest.mark.parametrize(
    "root, url",
    [
        ("s3://lab/labprobe", True),
        (Path("s3://lab/labprobe"), True),  # as pathlib mangles it: s3:/lab/labprobe
        ("gs://bucket/x", True),
        ("file:///srv/results", False),
        ("./results", False),
        ("/srv/results", False),
    ],
)
def test_one_check_decides_whether_a_root_is_a_url(root, url):
    assert is_url(root) is url
    place = StoreRoot(root)
    assert place.local is not url
    if url:
        assert place.uri == str(root).replace(":/", "://", 1).replace(":///", "://")
    else:
        assert place.path.is_absolute()


def test_every_path_under_a_root_is_built_in_one_place(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    remote, local = StoreRoot("s3://lab/p/"), StoreRoot(tmp_path / "store")
    assert remote.table("jobs") == "s3://lab/p/tables/jobs"
    assert local.table("jobs") == str(tmp_path / "store" / "tables" / "jobs")
    assert remote.join(remote.run_record("r1")) == "s3://lab/p/runs/r1.json"
    assert remote.join(remote.report("r1")) == "s3://lab/p/reports/r1.html"
    assert remote.join(remote.artifacts("j", "r")) == "s3://lab/p/artifacts/j/r"
    assert local.log_file("ray-r1.log") == tmp_path / "store" / "logs" / "ray-r1.log"
    assert remote.log_file("ray-r1.log") == tmp_path / "tmp" / "labprobe-ray-r1.log"  # copied in at the end
    assert remote.spill("r1") == local.spill("r1") == tmp_path / "tmp" / "labprobe-spill-r1.jsonl"
    assert not (Path.cwd() / "s3:").exists()


def test_a_local_root_reads_and_writes_its_plain_files_whole(tmp_path):
    place = StoreRoot(tmp_path / "store")
    assert place.read_text("runs/r1.json") is None and place.files("runs") == {}
    place.write_text("runs/r1.json", "{}\n")
    assert place.read_text("runs/r1.json") == "{}\n" and list(place.files("runs")) == ["r1.json"]
    assert [p.name for p in (tmp_path / "store" / "runs").iterdir()] == ["r1.json"]  # no temporary file left


def test_a_cron_log_of_an_object_store_sits_beside_the_cluster_file(tmp_path):
    from sweep_util import write_cluster

    from runner.lab.cluster import load_cluster

    path = write_cluster(tmp_path, {"p": [{"probe": "mask", "hosts": ["gx10"], "config": {"seq_len": 64}}]})
    assert _log_path(load_cluster(path), "p", None) == tmp_path / "store" / "logs" / "sweep-p.log"
    path.write_text(path.read_text().replace("root: store", "root: s3://lab/x"))
    assert _log_path(load_cluster(path), "p", None) == tmp_path / "logs" / "sweep-p.log"


# What delta-rs' object store said, as it said it (moto_server, deltalake 1.6.6): colour codes, a chain of causes.
MISSING_BUCKET = (
    "Generic S3 error\n          \x1b[31m↳\x1b[0m Error performing list request\n           \x1b[31m↳\x1b[0m Error "
    "performing GET http://127.0.0.1:5599/nobucket?delimiter=%2F&list-type=2&prefix=p%2Fx%2F in 3.5ms - Server "
    "returned non-2xx status code\n            \x1b[31m↳\x1b[0m 404 Not Found\n             \x1b[31m↳\x1b[0m <?xml "
    'version="1.0" encoding="utf-8"?>\n<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not '
    "exist</Message><BucketName>nobucket</BucketName></Error>\n"
)
REFUSED = (
    "Generic S3 error\n          \x1b[31m↳\x1b[0m Error performing POST http://127.0.0.1:5596/lab/p/x?uploads= in "
    "2.2s, after 10 retries, max_retries\n           \x1b[31m↳\x1b[0m 10, retry_timeout\n            \x1b[31m↳\x1b[0m "
    "180s  - HTTP error\n             \x1b[31m↳\x1b[0m error sending request\n              \x1b[31m↳\x1b[0m client "
    "error (Connect)\n               \x1b[31m↳\x1b[0m tcp connect error\n                \x1b[31m↳\x1b[0m Connection "
    "refused (os error 111)\n"
)


def test_an_object_stores_error_is_one_line_naming_what_the_server_said():
    assert one_line(OSError(MISSING_BUCKET)) == "NoSuchBucket: The specified bucket does not exist (404 Not Found)"
    assert one_line(OSError(REFUSED)) == "the server cannot be reached: Connection refused (os error 111)"
    assert one_line(ValueError("plain\nsecond line")) == "plain"
