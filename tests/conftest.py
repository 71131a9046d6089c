"""Shared fixtures. One real multi-node Ray cluster per test session (Ray takes ~5 s to start here)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Tests run on one machine with throwaway clusters; the product keeps Ray's token auth on.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
# GPU idleness in tests comes from JSON files `<dir>/<host>.json` instead of NVML (runner/gpu/nvml.py).
# Set before the cluster starts so every node's workers inherit it; tests rewrite the files.
FAKE_NVML_DIR = Path(tempfile.mkdtemp(prefix="labprobe-fake-nvml-"))
os.environ["LABPROBE_FAKE_NVML_DIR"] = str(FAKE_NVML_DIR)

HOST_LABEL = "labprobe.host"
REPO = Path(__file__).resolve().parents[1]


SLOW_FILES_FIRST = (
    "tests/runner/dispatch/test_gpu_queue.py",
    "tests/probes/step/variants/test_variants.py",
    "tests/probes/carrier/test_families.py",
    "tests/test_readme.py",
    "tests/runner/store/test_object_store.py",
    "tests/benchmarks/test_fault_loop.py",
    "tests/probes/carrier/test_carrier.py",
    "tests/probes/step/variants/test_stacks.py",
    "tests/probes/replay/test_replay.py",
    "tests/runner/store/test_export.py",
    "tests/runner/cli/test_sweep_faults.py",
    "tests/probes/step/variants/test_search_tolerance.py",
    "tests/runner/lab/test_schedule.py",
    "tests/runner/cli/test_sweep_ray_head.py",
)
"""The longest files (CI's --durations), longest first. With `--dist loadfile` xdist hands whole files to whichever
worker is free, in collection order: test_readme.py, collected last, kept one worker busy for two minutes while the
other had nothing left."""


def pytest_collection_modifyitems(config, items) -> None:
    missing = [name for name in SLOW_FILES_FIRST if not (config.rootpath / name).is_file()]
    if missing:  # a renamed file would silently go back to its alphabetical place
        raise pytest.UsageError(f"tests/conftest.py: SLOW_FILES_FIRST names no such file: {', '.join(missing)}")
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


def pytest_collection_finish(session) -> None:
    """Everything alive once the tests are collected (torch, transformers, every test module: ~400k objects) lives
    to the end: frozen out of the collector, so the probes' gc.collect() between measurements, run in this
    process by the in-process tests, walks what those tests made (0.3 s a collection over all of it). Collected
    first: no garbage frozen with them (the runner's own once-a-process freeze, done here before any probe runs)."""
    from runner.hosts.jobenv import spare_collector

    spare_collector()


@pytest.fixture(scope="session")
def ray_cluster():
    """A head (no host label, the driver's node) and two lab hosts, `gx10` and `ana-ml2`.

    Tests that kill nodes or need logical GPUs add their own nodes with `cluster.add_node(...)`
    and remove them when done, so the shared nodes stay as described here.
    """
    import ray
    from ray.cluster_utils import Cluster

    # No log monitor: the driver runs log_to_driver=False, so nothing reads what it pushes (~14 CPU-s a session).
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, "include_log_monitor": False}
    )
    cluster.add_node(num_cpus=2, labels={HOST_LABEL: "gx10"})
    cluster.add_node(num_cpus=2, labels={HOST_LABEL: "ana-ml2"})
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def fake_nvml_dir() -> Path:
    """The directory the nodes read fake NVML readings from (`<host>.json`); emptied after the test."""
    yield FAKE_NVML_DIR
    for path in FAKE_NVML_DIR.glob("*.json"):
        path.unlink()


def pytest_runtest_setup(item) -> None:
    """Ray workers cannot import test modules (pytest puts their folder on the driver's path only):
    ship functions defined in a test module by value, so tests can run them as Ray tasks."""
    from ray import cloudpickle

    module = getattr(item, "module", None)
    if module is not None and module.__name__ not in cloudpickle.cloudpickle._PICKLE_BY_VALUE_MODULES:
        cloudpickle.register_pickle_by_value(module)


@pytest.fixture(scope="session")
def moto(tmp_path_factory):
    """moto_server (a real S3-compatible server) on a free port, authentication on, bucket `lab`; stopped by
    its PID at the end. Here, not in tests/runner/store/conftest.py: a second module named conftest made
    `from conftest import ...` elsewhere find the wrong one."""
    from moto_util import Moto

    server = Moto(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture
def s3(moto, monkeypatch):
    """The standard AWS variables a lab sets for its server, for this test only."""
    for name, value in moto.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    return moto


@pytest.fixture(scope="session")
def demo_sweep(tmp_path_factory) -> Path:
    """The bundled `demo` plan (the repo's cluster.yaml) swept inline on host `local` once a test session, by
    whichever pytest worker asks first (~20 CPU-s a sweep): a folder with `store/`, the sweep's stdout `out.txt`
    and its exit code `code`. Read-only: a test that writes copies `store/` first."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: the workers' common folder
    folder = shared / "demo-sweep"
    with open(shared / "demo-sweep.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (folder / "code").exists():
            from runner import cli

            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            out = io.StringIO()
            argv = ["sweep", "--cluster", str(REPO / "cluster.yaml"), "--inline", "local", "--store"]
            with contextlib.redirect_stdout(out):
                code = cli.main([*argv, str(folder / "store")])
            (folder / "out.txt").write_text(out.getvalue())
            (folder / "code").write_text(str(code))  # last: its presence says the sweep is done
    return folder
