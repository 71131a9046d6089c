"""A sweep of 200 cheap CPU jobs into an object store and into a local folder: the wall time of each.

The jobs are `mask` probes of a config-only two-layer Qwen3 at 200 sequence lengths (each job a few
tens of milliseconds of compute, two commits: its `mask.layers` rows and its job row), run `--inline`
on this machine, so the time is the store's: the same sweep into `s3://lab/bench` on a moto_server
started here (moto[server], the test extra) and into a local folder. Then the same sweep again (every
job already stored: the skip-check alone), and `labprobe store check`. Each command is a fresh
`labprobe` process, timed from start to exit, imports included.

moto keeps every object in memory on this machine: its figures are labprobe's request overhead
against a server with no network and no disk, not a model of a real S3's latency.

    python benchmarks/store_s3.py [--jobs 200] [--rounds 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BUCKET = "lab"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto(work: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    """moto_server on a free port, bucket BUCKET; -> (its process, the AWS variables a lab would set)."""
    import boto3

    port = free_port()
    log = open(work / "moto.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-p", str(port)], stdout=log, stderr=log)
    env = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ALLOW_HTTP": "true",
    }
    for _ in range(300):
        try:
            boto3.client(
                "s3",
                endpoint_url=env["AWS_ENDPOINT_URL"],
                region_name="us-east-1",
                aws_access_key_id="bench",
                aws_secret_access_key="bench",
            ).create_bucket(Bucket=BUCKET)
            return proc, env
        except Exception:  # noqa: BLE001 - not listening yet
            time.sleep(0.1)
    raise RuntimeError("moto_server did not start")


def write_lab(work: Path, num_jobs: int) -> Path:
    """A cluster file whose plan `bench` is `num_jobs` mask jobs of a two-layer Qwen3 on host `local`."""
    import yaml

    config = json.loads((REPO / "demo" / "checkpoints" / "qwen3-0.6b-base" / "config.json").read_text())
    config.update(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=2)
    config.update(num_key_value_heads=1, head_dim=32)
    config.pop("layer_types", None)
    (work / "models" / "tiny").mkdir(parents=True)
    (work / "models" / "tiny" / "config.json").write_text(json.dumps(config))
    plan = [
        {"probe": "mask", "hosts": ["local"], "checkpoints": ["tiny"], "config": {"seq_len": 16 + n}}
        for n in range(num_jobs)
    ]
    lab = {
        "hosts": [{"name": "local", "address": "127.0.0.1", "checkpoints_root": str(work / "models")}],
        "checkpoints": [{"name": "tiny", "path": "tiny", "weights": "random"}],
        "plans": {"bench": plan},
    }
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(lab, sort_keys=False))
    return path


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", *argv], env=env, capture_output=True, text=True, cwd=REPO
    )
    return time.perf_counter() - start, done.returncode, (done.stdout + done.stderr).strip().splitlines()[-1:]


def one_round(cluster: Path, store: str, env: dict[str, str]) -> dict:
    base = ["--cluster", str(cluster), "--store", store]
    sweep_s, code, tail = timed(["sweep", *base, "--plan", "bench", "--inline", "local"], env)
    assert code == 0, (store, tail)
    again_s, code, tail = timed(["sweep", *base, "--plan", "bench", "--inline", "local"], env)
    assert code == 0, (store, tail)
    check_s, code, tail = timed(["store", "check", *base[2:]], env)
    assert code == 0, (store, tail)
    return {"sweep_s": round(sweep_s, 1), "rerun_all_done_s": round(again_s, 1), "store_check_s": round(check_s, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="each store this many times, alternating")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="labprobe-store-s3-"))
    cluster = write_lab(work, args.jobs)
    moto, aws = start_moto(work)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO)}
    try:
        figures: dict = {"local": [], "s3": []}
        for i in range(args.rounds):
            figures["local"].append(one_round(cluster, str(work / f"local-{i}"), env))
            figures["s3"].append(one_round(cluster, f"s3://{BUCKET}/bench-{i}", {**env, **aws}))
            print(json.dumps({k: v[-1] for k, v in figures.items()}), flush=True)
    finally:
        os.kill(moto.pid, signal.SIGTERM)
        moto.wait()
    figures["jobs"] = args.jobs
    figures["machine"] = f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"
    figures["versions"] = {p: version(p) for p in ("deltalake", "ray", "moto", "boto3", "pyarrow")}
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
