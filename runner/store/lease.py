"""The store's lock on an object store: one object, `<root>/.sweep.lock`, that every host sees.

A local store's lock is a `flock` the kernel drops when its holder dies (runner.dispatch.lock). An
object store has no such thing, so the lock is an object with a lease:

- taken by a conditional put (`If-None-Match: *`): of two hosts putting it at once exactly one
  succeeds, the other is told who holds it;
- it holds its holder's info (pid, host, run id, plan, start) and its lease, `lease_s`; the holder
  renews it every `lease_s / 4` from a background thread (a put `If-Match` its last ETag, so a
  holder that lost the lock never overwrites the new holder's);
- a holder that died stops renewing: once the object is older than its lease, by the server's clock
  (its Last-Modified against the Date of the server's answer, so hosts whose clocks disagree still
  agree), another command takes it over by a put `If-Match` the ETag it read: again one taker wins;
- released by a delete `If-Match` its ETag: never someone else's lock.

S3 and S3-compatible servers (MinIO, Ceph, moto) through boto3, with the store's storage options and
the standard AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL).
A root of another scheme (gs://, az://) has no lock here: commands that take it refuse in one line.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from probes.result import InputError, loads
from runner.store.root import LOCK, StoreRoot

LEASE_S = 60.0
"""How long a lock object stays its holder's without a renewal: a holder that died (SIGKILL, a lost
host) blocks the store this long at most. Renewed every quarter of it."""
SCHEMES = ("s3", "s3a")
"""Roots whose lock is an object here (S3 and S3-compatible servers)."""
ATTEMPTS = 4
"""Rounds of read-then-take before giving up (each lost only to another taker that won)."""
_TAKEN = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")
log = logging.getLogger("labprobe")


class Lease:
    """The lock object of one store, held (or not) by this process."""

    def __init__(self, place: StoreRoot, info: dict, *, lease_s: float = LEASE_S) -> None:
        if place.scheme not in SCHEMES:
            raise InputError(
                f"store {place.uri}: its lock (which keeps sweeps and chores of several hosts apart) works on "
                "s3:// stores (AWS S3, MinIO and other S3-compatible servers) only: use an s3:// or local store"
            )
        self.place, self.info, self.lease_s = place, info, float(lease_s)
        self.bucket, self.key = _bucket_key(place.join(LOCK))
        self.uri = place.join(LOCK)
        self.client = s3_client(place)
        self.lost = False
        self._etag: str | None = None
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- taking and leaving ------------------------------------------------------------------------
    def acquire(self) -> dict | None:
        """Take the lock: -> None when this process holds it now, else the holder's info (with
        `lease_left_s`). InputError when the server refuses or cannot be reached."""
        for _ in range(ATTEMPTS):
            if self._put(if_none_match=True):
                return None
            current = read(self)
            if current is None:
                continue  # released between our put and our read: try again
            info, etag, left_s = current
            if left_s > 0:
                return {**info, "lease_left_s": round(left_s)}
            if self._put(if_match=etag):  # its holder stopped renewing: take it over
                log.warning(
                    f"store {self.place.uri}: took over the lock of {info.get('plan') or 'a command'} (pid "
                    f"{info.get('pid')} on {info.get('host')}), not renewed for {-left_s + self._lease(info):.0f} s"
                )
                return None
        current = read(self)
        return {**current[0], "lease_left_s": round(current[2])} if current else {}

    def update(self, info: dict) -> None:
        """New holder info (the plan's job counts, for `labprobe status`): written with the next renewal, now."""
        self.info = info
        self._renew()

    def release(self) -> None:
        """Stop renewing and delete the lock object, if it is still this process's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._mutex:
            etag, self._etag = self._etag, None
        if etag is None or self.lost:
            return
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=etag)
        except Exception as exc:  # noqa: BLE001 - a server without conditional deletes, or gone: see below
            if _code(exc) in _TAKEN:
                return  # another holder's now: not ours to delete
            self._release_unconditionally(etag)

    def _release_unconditionally(self, etag: str) -> None:
        """A server that takes no If-Match on delete: delete after checking the ETag (a taker can only win
        in between after our lease ran out). A release that fails leaves the lease to run out."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key)
            if head["ETag"] == etag:
                self.client.delete_object(Bucket=self.bucket, Key=self.key)
        except Exception as exc:  # noqa: BLE001 - the lock then runs out by itself
            log.warning(
                f"store {self.place.uri}: lock {self.uri} not released ({_why(exc)}); it runs out in {self.lease_s:.0f} s"
            )

    # -- the lease ----------------------------------------------------------------------------------
    def _body(self) -> bytes:
        """Our info, the lease, and when it was renewed: each renewal a new ETag (an ETag is the body's MD5)."""
        renewed = datetime.now().astimezone().isoformat(timespec="milliseconds")
        return json.dumps({**self.info, "lease_s": self.lease_s, "renewed_at": renewed}).encode()

    def _put(self, *, if_none_match: bool = False, if_match: str | None = None) -> bool:
        """One conditional put of our info: True when it took, False when the condition failed."""
        extra: dict[str, Any] = {"IfNoneMatch": "*"} if if_none_match else {"IfMatch": if_match}
        try:
            answer = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), **extra)
        except Exception as exc:  # noqa: BLE001 - boto3's errors: a failed condition, or the server's refusal
            if _code(exc) in _TAKEN:
                return False
            raise InputError(f"store {self.place.uri}: cannot take its lock {self.uri} ({_why(exc)})") from None
        with self._mutex:
            self._etag, self.lost = answer["ETag"], False
        self._start_renewing()
        return True

    def _start_renewing(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._renew_loop, name="labprobe-lease", daemon=True)
            self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_s / 4):
            self._renew()

    def _renew(self) -> None:
        """Put our info again, If-Match our last ETag. Lost (another took it over after our lease ran
        out: this host was cut off that long): said once, never taken back. A server not answering:
        tried again at the next renewal."""
        with self._mutex:
            if self._etag is None or self.lost:
                return
            try:
                answer = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), IfMatch=self._etag)
                self._etag = answer["ETag"]
            except Exception as exc:  # noqa: BLE001 - see the docstring
                if _code(exc) in _TAKEN:
                    self.lost = True
                    log.warning(
                        f"store {self.place.uri}: lost its lock {self.uri}: not renewed within {self.lease_s:.0f} s, "
                        "another command took it over"
                    )
                else:
                    log.warning(f"store {self.place.uri}: lock {self.uri} not renewed ({_why(exc)}); trying again")

    @staticmethod
    def _lease(info: dict) -> float:
        try:
            return float(info.get("lease_s", LEASE_S))
        except (TypeError, ValueError):
            return LEASE_S


def read(lease: Lease) -> tuple[dict, str, float] | None:
    """(holder info, ETag, seconds of lease left by the server's clock) of the lock object, None when
    there is none."""
    try:
        answer = lease.client.get_object(Bucket=lease.bucket, Key=lease.key)
    except Exception as exc:  # noqa: BLE001 - boto3's errors
        if _code(exc) in ("NoSuchKey", "404"):
            return None
        raise InputError(f"store {lease.place.uri}: cannot read its lock {lease.uri} ({_why(exc)})") from None
    try:
        info = loads(answer["Body"].read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        info = {}
    info = info if isinstance(info, dict) else {}
    now = _server_now(answer)
    age_s = (now - answer["LastModified"]).total_seconds()
    return info, answer["ETag"], Lease._lease(info) - age_s


def holder(place: StoreRoot) -> dict | None:
    """The lock's holder info while its lease runs, else None (no lock, one nobody renews, or a scheme
    without a lock)."""
    if place.scheme not in SCHEMES:
        return None
    lease = Lease(place, {})
    current = read(lease)
    if current is None or current[2] <= 0:
        return None
    return {**current[0], "lease_left_s": round(current[2])}


def _server_now(answer: dict) -> datetime:
    date = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        return parsedate_to_datetime(date) if date else datetime.now(timezone.utc)
    except (TypeError, ValueError):
        return datetime.now(timezone.utc)


def _bucket_key(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


def _option(options: dict[str, str], names: tuple[str, ...], env: tuple[str, ...]) -> str | None:
    """A storage option by any of its delta-rs spellings (any case), else the first variable set."""
    lower = {k.lower(): v for k, v in options.items()}
    for name in names:
        if lower.get(name):
            return lower[name]
    return next((os.environ[v] for v in env if os.environ.get(v)), None)


def s3_client(place: StoreRoot) -> Any:
    """A boto3 S3 client configured as delta-rs is for this store: its storage options first (the
    cluster file's `store.storage_options`), else the standard AWS variables."""
    import boto3
    from botocore.config import Config

    options = place.storage_options
    endpoint = _option(
        options, ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"), ("AWS_ENDPOINT_URL", "AWS_ENDPOINT")
    )
    region = _option(options, ("aws_region", "region", "aws_default_region"), ("AWS_REGION", "AWS_DEFAULT_REGION"))
    virtual = _option(
        options,
        ("aws_virtual_hosted_style_request", "virtual_hosted_style_request"),
        ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST",),
    )
    config = Config(
        connect_timeout=5,
        read_timeout=20,
        retries={"max_attempts": 3, "mode": "standard"},
        s3={"addressing_style": "virtual" if (virtual or "").lower() == "true" or not endpoint else "path"},
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region or "us-east-1",
        aws_access_key_id=_option(options, ("aws_access_key_id", "access_key_id"), ()),
        aws_secret_access_key=_option(options, ("aws_secret_access_key", "secret_access_key"), ()),
        aws_session_token=_option(options, ("aws_session_token", "session_token", "token"), ()),
        config=config,
    )


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    code = str(response.get("Error", {}).get("Code", ""))
    return code or str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _why(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and response.get("Error"):
        error = response["Error"]
        return f"{error.get('Code')}: {error.get('Message') or 'refused'}".rstrip(".")
    return " ".join(str(exc).split()) or type(exc).__name__
