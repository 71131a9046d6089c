"""Where a store lives: its root, a local folder or an object-store URL, and every path under it.

`StoreRoot` is the one owner of the root. Every command opens its store through it (runner.cli.stores
builds it from `--store`, the cluster file's `store:` and the environment), and every path below the
root is built here:

    <root>/tables/<name>/                Delta tables (runner.store.delta)
    <root>/artifacts/<job_id>/<run_id>/  raw evidence (runner.store.artifacts)
    <root>/runs/<run_id>.json            a sweep's plan and work (runner.analysis.report_runs)
    <root>/reports/<run_id>.html         reports
    <root>/logs/<name>                   Ray's output of a sweep or a purge
    <root>/.sweep.lock                   the lock (runner.dispatch.lock; on an object store an object
                                         with a lease, runner.store.lease)

A purge's dry-run plan is rows of the purge tables, like any result. Kept outside the root: a sweep's
spill file (results the store refused, in $TMPDIR: the store may be what failed) and, on an object
store, the log Ray writes while a command runs (a local file, copied into logs/ at the end) and a
schedule's cron log (appended to by the shell, beside the cluster file).

Plain files under an object-store root go through delta-rs' own object store (the same storage
options, the same AWS_*/GOOGLE_*/AZURE_* variables as the tables): a put is whole or absent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from probes.result import InputError

URL = re.compile(r"^([a-z][a-z0-9+.-]*):/+(.+)$")
"""`scheme://rest`, also as `pathlib.Path` mangles it (`s3:/bucket/x`)."""
TABLES = "tables"
ARTIFACTS = "artifacts"
RUNS = "runs"
REPORTS = "reports"
LOGS = "logs"
LOCK = ".sweep.lock"
if TYPE_CHECKING:
    import pyarrow.fs as pa_fs

CHECK_BYTES = 64 * 1024
"""Written by the write check: a place that cannot take this cannot take a result file."""


def is_url(root: str | Path) -> bool:
    """The one test of whether a root names an object store (`s3://bucket/x`; `file://` is a folder)."""
    match = URL.match(str(root))
    return match is not None and match.group(1) != "file"


class StoreRoot:
    """A store's root and its storage options; builds the paths under it and reads and writes its plain files."""

    def __init__(self, root: str | Path, storage_options: dict[str, str] | None = None) -> None:
        text = str(root)
        match = URL.match(text)
        if is_url(text):
            self.uri, self.local = f"{match.group(1)}://{match.group(2)}".rstrip("/"), False
        else:
            if match:  # file:///abs/path
                text = "/" + match.group(2).lstrip("/")
            self.uri, self.local = str(Path(text).expanduser().absolute()), True
        self.storage_options = dict(storage_options or {})
        self._fs: pa_fs.FileSystem | None = None
        self._handler = None
        self._reachable = False

    @classmethod
    def of(cls, root: StoreRoot | str | Path, storage_options: dict[str, str] | None = None) -> StoreRoot:
        return root if isinstance(root, StoreRoot) else cls(root, storage_options)

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"StoreRoot({self.uri!r})"

    @property
    def scheme(self) -> str:
        return "file" if self.local else self.uri.split("://", 1)[0]

    @property
    def path(self) -> Path:
        """The root as a local folder (local roots only)."""
        assert self.local, f"{self.uri} is not a local folder"
        return Path(self.uri)

    # -- where -------------------------------------------------------------------------------------
    def join(self, *parts: str) -> str:
        """The uri (a path, for a local root) of `parts` under the root."""
        return "/".join([self.uri.rstrip("/"), *parts])

    def table(self, name: str) -> str:
        return self.join(TABLES, name)

    @staticmethod
    def artifacts(job_id: str, run_id: str) -> str:
        return f"{ARTIFACTS}/{job_id}/{run_id}"

    @staticmethod
    def run_record(run_id: str) -> str:
        return f"{RUNS}/{run_id}.json"

    @staticmethod
    def report(run_id: str) -> str:
        return f"{REPORTS}/{run_id}.html"

    @staticmethod
    def log(name: str) -> str:
        return f"{LOGS}/{name}"

    @staticmethod
    def spill(run_id: str) -> Path:
        """Where a sweep keeps the results the store refused: $TMPDIR, never the store (its disk or its
        server may be what failed)."""
        return Path(tempfile.gettempdir()) / f"labprobe-spill-{run_id}.jsonl"

    def log_file(self, name: str) -> Path:
        """A local file for a log named `name`: `<root>/logs/<name>` on a local root when that folder can
        be written, else in $TMPDIR (an object store's copy is made by `keep_log` at the end)."""
        if self.local:
            folder = self.path / LOGS
            try:
                folder.mkdir(parents=True, exist_ok=True)
                if os.access(folder, os.W_OK):
                    return folder / name
            except OSError:
                pass
        return Path(tempfile.gettempdir()) / f"labprobe-{name}"

    @contextlib.contextmanager
    def keeping_log(self, file: Path, name: str) -> Iterator[None]:
        """On an object store: at the end, however it ends, move the local log `file` (when there is one)
        onto the end of logs/<name> (a log a local store appends to, a purge's, keeps every run's part
        there too). A copy that fails is a warning and the file stays: the command's results matter
        more than its log."""
        try:
            yield
        finally:
            if not self.local and file.is_file():
                try:
                    earlier = (self.read_text(self.log(name)) or "").encode("utf-8")
                    self.write_bytes(self.log(name), earlier + file.read_bytes())
                    file.unlink()
                except (OSError, InputError) as exc:
                    logging.getLogger("labprobe").warning(
                        f"{file}: not copied into {self.join(self.log(name))} ({exc}); it stays here"
                    )

    # -- plain files under the root ----------------------------------------------------------------
    def filesystem(self) -> pa_fs.FileSystem:
        """Arrow's view of the root (paths relative to it): a local folder, or delta-rs' object store."""
        import pyarrow.fs as pa_fs

        if self._fs is None:
            if self.local:
                self._fs = pa_fs.SubTreeFileSystem(_arrow_path(self.uri), pa_fs.LocalFileSystem())
            else:
                from deltalake.fs import DeltaStorageHandler

                self._handler = DeltaStorageHandler(self.uri, self.storage_options or None)
                self._fs = pa_fs.PyFileSystem(self._handler)
        return self._fs

    def read_text(self, rel: str) -> str | None:
        """The text of file `rel`, None when there is none. InputError when the store cannot be read."""
        try:
            with self.filesystem().open_input_stream(rel) as handle:
                return handle.read().decode("utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            if self.local and not Path(self.uri, rel).exists():
                return None
            raise InputError(f"store {self.uri}: {rel} cannot be read ({one_line(exc)})") from None

    def write_bytes(self, rel: str, data: bytes) -> str:
        """Write file `rel` whole (a local file through a temporary file and a rename; an object in one
        put); -> its uri. OSError when it cannot be written."""
        if self.local:
            path = self.path / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
            tmp.write_bytes(data)
            os.replace(tmp, path)
            return str(path)
        self.filesystem()
        try:
            # delta-rs' own stream, not Arrow's wrapper of it: under pyarrow 26 the wrapper hands it
            # Buffers, which it refuses (TypeError). Closing it completes the upload: the object appears.
            stream = self._handler._handler.open_output_stream(rel, None)
            stream.write(data)
            stream.close()
        except OSError as exc:
            raise OSError(one_line(exc)) from None
        return self.join(rel)

    def write_text(self, rel: str, text: str) -> str:
        return self.write_bytes(rel, text.encode("utf-8"))

    def files(self, rel: str) -> dict[str, datetime]:
        """The files directly in folder `rel` (not dot-named temporary ones) -> when each was written."""
        import pyarrow.fs as pa_fs

        try:
            infos = self.filesystem().get_file_info(pa_fs.FileSelector(rel, allow_not_found=True))
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise InputError(f"store {self.uri}: {rel}/ cannot be listed ({one_line(exc)})") from None
        epoch = datetime.fromtimestamp(0, tz=timezone.utc)
        return {
            i.base_name: (i.mtime.astimezone(timezone.utc) if i.mtime else epoch)
            for i in infos
            if i.type == pa_fs.FileType.File and not i.base_name.startswith(".")
        }

    # -- can it be used ------------------------------------------------------------------------------
    def require_reachable(self) -> None:
        """An object-store root must answer (the bucket exists, the credentials are taken): else one
        line naming what the server said. Asked once per StoreRoot; a local root is not asked here."""
        import pyarrow.fs as pa_fs

        if self.local or self._reachable:
            return
        try:
            self.filesystem().get_file_info(pa_fs.FileSelector("", allow_not_found=True))
        except OSError as exc:
            raise InputError(f"store {self.uri}: cannot be read ({one_line(exc)})") from None
        self._reachable = True

    def check_writable(self) -> None:
        """InputError naming the store unless a file can be written and removed under the root: before
        a sweep hands out its first job (a full disk, a read-only folder, a missing bucket, refused
        credentials are one line then, not every job computed and thrown away at its write)."""
        if self.local:
            _check_folder_writable(self.path)
            return
        rel = f".write-check-{os.getpid()}"
        try:
            self.write_bytes(rel, b"\0" * CHECK_BYTES)
            self.filesystem().delete_file(rel)
        except OSError as exc:
            raise InputError(f"store {self.uri}: cannot be written ({one_line(exc)}); no job was run") from None


def _check_folder_writable(root: Path) -> None:
    if root.exists() and not root.is_dir():
        raise InputError(f"store {root}: not a folder (--store or store.root names a file); no job was run")
    probe = root / f".write-check-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"\0" * CHECK_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise InputError(f"store {root}: cannot be written ({exc.strerror or exc}); no job was run") from None
    finally:
        try:
            probe.unlink()
        except OSError:  # never created, or the store vanished meanwhile: nothing left behind
            pass


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CODE = re.compile(r"<Code>([^<]*)</Code>(?:\s*<Message>([^<]*)</Message>)?")
_STATUS = re.compile(r"\b([45]\d\d) [A-Z][A-Za-z ]+")


def one_line(exc: BaseException | str, limit: int = 300) -> str:
    """An error of delta-rs or its object store in one line: the server's error code and message and the
    HTTP status (`NoSuchBucket: The specified bucket does not exist (404 Not Found)`), or the innermost
    cause of a failed connection (`Connection refused (os error 111)`), else the first line. delta-rs
    chains causes over many lines, with colour codes and a Rust backtrace."""
    text = _ANSI.sub("", str(exc)).strip()
    code = _CODE.search(text)
    if code:
        status = _STATUS.search(text)
        message = f"{code.group(1)}: {code.group(2).strip().rstrip('.')}" if code.group(2) else code.group(1)
        return message + (f" ({status.group(0).strip()})" if status else "")
    lines = [line.strip().lstrip("↳").strip() for line in text.splitlines() if line.strip()]
    first = " ".join((lines[0] if lines else type(exc).__name__).split())
    first = first if len(first) <= limit else first[:limit] + "..."
    if any(mark in text for mark in ("error sending request", "tcp connect error", "operation timed out")):
        return f"the server cannot be reached: {lines[-1] if len(lines) > 1 else first}"
    return first


def _arrow_path(path: str) -> str:
    """A local path as Arrow takes it (UTF-8 text): under an ASCII locale Python holds a non-ASCII
    path's bytes as surrogates, which Arrow cannot encode (UnicodeEncodeError from every command)."""
    try:
        return os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return path
