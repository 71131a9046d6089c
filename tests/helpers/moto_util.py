"""A real S3-compatible server for tests: moto's standalone `moto_server` (from moto[server]), started on
a free port with authentication on, so wrong credentials are refused as S3 refuses them; and a gate in
front of it that tests close and open again (the endpoint going away and coming back: moto keeps its
objects in memory, so stopping moto itself would lose the bucket, which a restarted MinIO keeps)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

BUCKET = "lab"
REGION = "us-east-1"
IAM_CALLS = 3
"""Requests moto takes before it checks credentials: the three that make the test's user and key."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Moto:
    """One moto_server process, a user with a key allowed everything, and bucket BUCKET."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = folder / "moto.log"
        server = Path(sys.executable).parent / "moto_server"
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(IAM_CALLS)}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(server), "-p", str(self.port)], stdout=log, stderr=subprocess.STDOUT, env=env
            )
        self._wait_listening()
        self.key_id, self.secret = self._make_user()
        self.client().create_bucket(Bucket=BUCKET)

    def _wait_listening(self, timeout_s: float = 30.0) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"moto_server did not listen on {self.port} within {timeout_s} s")

    def _make_user(self) -> tuple[str, str]:
        import boto3

        iam = boto3.client(
            "iam", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
        )
        iam.create_user(UserName="lab")
        key = iam.create_access_key(UserName="lab")["AccessKey"]
        allow = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="lab", PolicyName="all", PolicyDocument=json.dumps(allow))
        return key["AccessKeyId"], key["SecretAccessKey"]

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """The standard AWS variables a lab sets for this server (plain HTTP, as a MinIO on the LAN)."""
        return {
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=getattr(self, "key_id", "x"),
            aws_secret_access_key=getattr(self, "secret", "x"),
        )

    def keys(self, prefix: str) -> list[str]:
        """Every object key under `prefix/` in the bucket."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix.rstrip("/") + "/")
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def buckets(self) -> list[str]:
        return sorted(b["Name"] for b in self.client().list_buckets()["Buckets"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Gate:
    """A TCP forwarder to moto on a port of its own, in a process of its own (delta-rs holds the GIL
    through its requests: a forwarding thread in the test's process would never run). `close()` and the
    endpoint is gone (new connections refused, open ones cut), `open()` and it is back on the same port
    with every object kept."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def open(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, str(self.port), str(self.target)])
        end = time.monotonic() + 30
        while time.monotonic() < end:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.05)
        raise RuntimeError(f"the gate did not listen on {self.port}")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)  # every connection it held is cut with it
            self.proc.wait()


def _forward(port: int, target: int) -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", target))
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


VOLATILE = {"run_id", "finished_at", "started_at", "wall_s", "env_json", "code_version"}
"""Columns that differ between two clean runs of the same job: left out when exports are compared."""


def newest_rows(export: Path) -> dict[str, list[tuple]]:
    """Per exported table, the rows of each job's newest run, as sorted tuples of the columns that two
    clean runs of the same jobs share: what "the export equals a clean run's" compares."""
    import pandas as pd

    jobs = pd.read_parquet(export / "jobs.parquet").sort_values(["finished_at", "run_id"])
    newest = jobs.drop_duplicates("job_id", keep="last")
    keep = set(zip(newest["job_id"], newest["run_id"]))
    out = {}
    for path in sorted(export.glob("*.parquet")):
        frame = pd.read_parquet(path)
        frame = frame[[pair in keep for pair in zip(frame["job_id"], frame["run_id"])]]
        columns = sorted(c for c in frame.columns if c not in VOLATILE)
        out[path.stem] = sorted(tuple(str(v) for v in row) for row in frame[columns].itertuples(index=False))
    return out


if __name__ == "__main__":  # the gate's own process: python moto_util.py PORT TARGET_PORT
    _forward(int(sys.argv[1]), int(sys.argv[2]))
