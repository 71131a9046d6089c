"""GpuPlacer: waiting with backoff, re-placement after a refusal, the host's wait clock and the deadline;
and on a real Ray cluster, placement reading the fake NVML file on the labelled node and a GPU job
waiting on the busy card Ray gave it, never moving to another."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from runner.dispatch.placement import GpuPlacer
from runner.gpu.idle import GIB, GpuBusyError, GpuReading


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def reading(host: str, word: str, reason: str = "") -> GpuReading:
    return GpuReading(host=host, index=0, name="NVIDIA H200", verdict=word, reason=reason)


class Script:
    """A fake reader answering from a per-host list of verdicts, counting its reads."""

    def __init__(self, **answers: list[str]):
        self.answers = {h: list(a) for h, a in answers.items()}
        self.num_reads = 0

    def __call__(self, host: str) -> list[GpuReading]:
        self.num_reads += 1
        word = self.answers[host].pop(0)
        return [reading(host, word, "pid 4242 computes on it" if word == "busy" else "")]


def test_busy_host_backs_off_along_the_schedule_then_places():
    clock, read = Clock(), Script(gx10=["busy"] * 7 + ["idle"])
    placer = GpuPlacer(deadline=None, backoff_s=(2, 5, 15), clock=clock, read=read)
    waits = []
    for _ in range(7):
        ok, reason = placer.try_place("gx10")
        assert not ok and reason == "gx10: GPU 0 busy: pid 4242 computes on it"
        waits.append(placer.next_attempt_at("gx10") - clock.now)
        clock.now = placer.next_attempt_at("gx10")
    assert waits == [2, 5, 15, 15, 15, 15, 15]  # the last delay repeats
    assert placer.try_place("gx10") == (True, "")
    assert placer.next_attempt_at("gx10") == 0.0 and placer.reason("gx10") == ""  # not backing off
    assert read.num_reads == 8


def test_a_fresh_host_may_be_asked_at_once_under_a_real_clock():
    placer = GpuPlacer(deadline=None, read=Script(gx10=["idle"]))
    assert time.time() >= placer.next_attempt_at("gx10")  # the clock ticking between reads
    assert placer.try_place("gx10") == (True, "")


def test_asking_while_backing_off_does_not_read_nor_extend_the_wait():
    clock, read = Clock(), Script(gx10=["busy", "idle"])
    placer = GpuPlacer(deadline=None, clock=clock, read=read)
    placer.try_place("gx10")
    clock.now += 1.5
    ok, reason = placer.try_place("gx10")
    assert not ok and "backing off" in reason and "pid 4242" in reason
    assert read.num_reads == 1 and placer.next_attempt_at("gx10") == 1002.0
    clock.now += 0.5
    assert placer.try_place("gx10") == (True, "")


def test_refusal_at_start_backs_the_host_off_and_another_host_is_placed():
    clock, read = Clock(), Script(gx10=["idle", "idle"], ana=["idle"])
    placer = GpuPlacer(deadline=None, backoff_s=(2, 5), clock=clock, read=read)
    assert placer.try_place("gx10") == (True, "")
    placer.refused("gx10", "gx10: GPU 0 busy: pid 77 computes on it")  # the job's own guard said no
    assert placer.next_attempt_at("gx10") == clock.now + 2
    assert placer.try_place("gx10")[0] is False and placer.reason("gx10").endswith("pid 77 computes on it")
    assert placer.try_place("ana") == (True, "")  # other hosts are not held back
    placer.refused("gx10", "again")
    assert placer.next_attempt_at("gx10") == clock.now + 5  # second refusal in a row: next delay
    clock.now += 5
    assert placer.try_place("gx10") == (True, "")


def test_deadline_expires_and_caps_the_wait():
    clock, read = Clock(), Script(gx10=["no-gpu"])
    placer = GpuPlacer(deadline=1010.0, backoff_s=(60,), clock=clock, read=read)
    assert not placer.expired()
    assert placer.try_place("gx10")[0] is False
    assert placer.next_attempt_at("gx10") == 1010.0  # not 1060: the sweep wakes at the deadline
    clock.now = 1010.0
    assert placer.expired() and "no-gpu" in placer.reason("gx10")
    assert not GpuPlacer(deadline=None, clock=clock).expired()


def test_the_wait_runs_from_when_the_host_had_a_slot_free_of_our_own_work():
    """Queued behind labprobe's own GPU job, a host's clock does not run; alone and busy, it runs to wait_s."""
    clock, read = Clock(), Script(gx10=["busy"] * 5 + ["idle"])
    placer = GpuPlacer(deadline=None, wait_s=30.0, backoff_s=(2,), clock=clock, read=read)
    placer.try_place("gx10", alone=False)  # our own job runs there: the busy card may be it
    clock.now += 100
    assert not placer.expired("gx10") and placer.waited("gx10") == (0.0, "")
    placer.try_place("gx10")  # alone: someone else's process; the clock starts now
    t0 = clock.now
    clock.now += 20
    assert not placer.expired("gx10") and placer.waited("gx10") == (20.0, "gx10: GPU 0 busy: pid 4242 computes on it")
    placer.behind_own_work("gx10")  # our own job took the host again: queued behind it, the clock stops
    clock.now += 20
    assert not placer.expired("gx10")
    placer.try_place("gx10")
    t0 = clock.now
    assert placer.next_attempt_at("gx10") == t0 + 2
    clock.now = t0 + 29
    placer.try_place("gx10")
    assert placer.next_attempt_at("gx10") == t0 + 30  # capped at the end of the wait
    clock.now = t0 + 30
    assert placer.expired("gx10") and not placer.expired()  # the host's wait ran out, not the sweep's deadline
    assert placer.try_place("gx10")[0] is False
    clock.now += 1000
    assert placer.try_place("gx10") == (True, "") and not placer.expired("gx10")


def test_a_failing_reader_is_an_unreachable_host():
    def read(host):
        raise TimeoutError("no answer within 33 s")

    placer = GpuPlacer(deadline=None, clock=Clock(), read=read)
    assert placer.try_place("gx10") == (False, "gx10: unreachable: TimeoutError: no answer within 33 s")
    with pytest.raises(ValueError, match="backoff_s"):
        GpuPlacer(deadline=None, backoff_s=())


# -- real Ray -------------------------------------------------------------------------------------------


def write_fake(directory: Path, host: str, pids: list[int]) -> None:
    (directory / f"{host}.json").write_text(
        json.dumps(
            [
                {
                    "index": 0,
                    "name": "NVIDIA H200",
                    "uuid": "GPU-fake-0",
                    "mem_used_bytes": 6 * GIB * len(pids),
                    "util_pct": [0, 0, 0],
                    "processes": [{"pid": p, "mem_used_bytes": 6 * GIB} for p in pids],
                }
            ]
        )
    )


def test_try_place_reads_the_fake_file_on_the_labelled_node(ray_cluster, fake_nvml_dir):
    write_fake(fake_nvml_dir, "gx10", [999_999])
    write_fake(fake_nvml_dir, "ana-ml2", [])
    placer = GpuPlacer(deadline=None)
    ok, reason = placer.try_place("gx10")
    assert not ok and "GPU 0 busy: pid 999999 (user ?, 6.00 GiB) computes on it" in reason
    assert placer.try_place("ana-ml2") == (True, "")
    ok, reason = placer.try_place("nohost")
    assert not ok and "unreachable" in reason and "labprobe.host=nohost" in reason


def gpu_job(host: str) -> str:
    """What a GPU job does first (runs as a Ray task with num_gpus=1)."""
    from runner.gpu.idle import guard

    guard(host)
    return os.environ["CUDA_VISIBLE_DEVICES"]


def held_gpu_job(host: str) -> tuple[str, str, str]:
    """What a GPU job does first (a Ray task with num_gpus=1), holding its card a moment so Ray hands a
    concurrent job the other one. -> (CUDA_VISIBLE_DEVICES as Ray set it, as after the guard, outcome)."""
    from runner.gpu.idle import guard

    assigned = os.environ["CUDA_VISIBLE_DEVICES"]
    try:
        card = guard(host, wait_s=3.0)
        outcome = f"ran on GPU {card.index}"
    except GpuBusyError as exc:
        outcome = str(exc)
    time.sleep(2)
    return assigned, os.environ["CUDA_VISIBLE_DEVICES"], outcome


def test_gpu_job_on_a_two_gpu_host_keeps_to_the_card_ray_assigned(ray_cluster, fake_nvml_dir):
    """Card 0 busy with someone's run, card 1 idle; two jobs at once get one card each from Ray: the one
    given card 1 runs there, the one given card 0 waits on it and gives up naming it, never taking card 1."""
    import ray

    from runner.hosts.nodes import pinned

    node = ray_cluster.add_node(num_cpus=1, num_gpus=2, labels={"labprobe.host": "gpu-b"})
    try:
        (fake_nvml_dir / "gpu-b.json").write_text(
            json.dumps(
                [
                    {
                        "index": 0,
                        "name": "NVIDIA H200",
                        "uuid": "GPU-fake-0",
                        "mem_used_bytes": 6 * GIB,
                        "util_pct": [0, 0, 0],
                        "processes": [{"pid": 31337, "mem_used_bytes": 6 * GIB}],
                    },
                    {
                        "index": 1,
                        "name": "NVIDIA H200",
                        "uuid": "GPU-fake-1",
                        "mem_used_bytes": 0,
                        "util_pct": [0, 0, 0],
                        "processes": [],
                    },
                ]
            )
        )
        assert GpuPlacer(deadline=None).try_place("gpu-b") == (True, "")
        job = ray.remote(max_retries=0, num_gpus=1, num_cpus=0)(held_gpu_job).options(**pinned("gpu-b"))
        busy, idle = sorted(ray.get([job.remote("gpu-b") for _ in range(2)], timeout=60))
        assert idle == ("1", "1", "ran on GPU 1")
        assert busy[:2] == ("0", "0") and "GPU 0 busy: pid 31337" in busy[2] and "GPU 1" not in busy[2], busy
        assert "waited 3 s on the card Ray gave this job" in busy[2]
    finally:
        ray_cluster.remove_node(node)


def test_a_gpu_assignment_naming_no_card_is_skipped_unreadable_at_once(fake_nvml_dir, monkeypatch):
    """The job's guard finds CUDA_VISIBLE_DEVICES names no card NVML sees (MIG UUIDs): no wait clears
    it; the job is skipped as unreadable (the sweep exits non-zero), not as busy."""
    from runner.dispatch.launch import GpuGuard, execute
    from runner.dispatch.placement import gpu_skip_kind
    from runner.lab.plan import Job

    write_fake(fake_nvml_dir, "gpu-m", [])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f2a")
    job = Job(
        plan="p", entry=0, probe="carrier", checkpoint="c", host="gpu-m", corpus=None, config={}, config_hash="h",
        gpu=True, paths={}, job_id="j",
    )  # fmt: skip
    t0 = time.monotonic()
    outcome = execute(job, guard=GpuGuard(runs_dir=None, thresholds=None, wait_s=60))
    assert time.monotonic() - t0 < 5
    assert outcome.status == "skipped" and "names no GPU that NVML sees" in outcome.reason
    assert gpu_skip_kind(outcome.reason) == "unreadable"
