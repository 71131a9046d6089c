"""The one timing helper: statistics recomputed by hand, extension driven by a scripted clock."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probes.step.measure.timing import MAX_SPREAD, Timings, time_steps


class ScriptedClock:
    """A clock that each step() advances by the next scripted duration."""

    def __init__(self, durations):
        self.durations = list(durations)
        self.now = 0.0
        self.num_calls = 0

    def __call__(self) -> float:
        return self.now

    def step(self) -> None:
        self.num_calls += 1
        self.now += self.durations.pop(0)


def test_statistics_match_a_hand_computation():
    raw = (9.0, 9.0, 1.00, 1.04, 0.98, 1.10, 1.01)
    t = Timings(raw_s=raw, num_warmup=2, device="cpu")
    window = np.array(raw[2:])
    median = float(np.median(window))
    assert t.num_steps == 5
    assert t.median_s == pytest.approx(median)
    assert t.spread == pytest.approx((window.max() - window.min()) / median)
    q1, q3 = np.percentile(window, [25, 75])  # linear interpolation = statistics' inclusive method
    assert t.iqr == pytest.approx((q3 - q1) / median)
    assert not t.trustworthy  # 12% spread


def test_stable_steps_are_not_extended():
    clock = ScriptedClock([5.0, 5.0] + [1.0] * 3)
    t = time_steps(clock.step, device="cpu", warmup=2, steps=3, max_steps=10, clock=clock)
    assert clock.num_calls == 5
    assert t.raw_s == (5.0, 5.0, 1.0, 1.0, 1.0)
    assert (t.median_s, t.spread, t.num_warmup) == (1.0, 0.0, 2)


def test_a_noisy_start_extends_until_the_last_window_is_steady():
    # timed: 1.0 1.5 1.0 -> spread 50%; +1.0 -> window 1.5 1.0 1.0 still; +1.0 -> 1.0 1.0 1.0: stop
    clock = ScriptedClock([5.0, 1.0, 1.5, 1.0, 1.0, 1.0] + [7.0] * 10)
    t = time_steps(clock.step, device="cpu", warmup=1, steps=3, max_steps=10, clock=clock)
    assert clock.num_calls == 6
    assert t.raw_s == (5.0, 1.0, 1.5, 1.0, 1.0, 1.0)
    assert t.num_warmup == 3 and t.window_s == (1.0, 1.0, 1.0)
    assert t.trustworthy
    # the quiet window hides the 1.5 s step; the spread over every timed step shows it
    assert t.spread == 0.0 and t.spread_all == pytest.approx((1.5 - 1.0) / 1.0)
    assert t.to_dict()["spread_all"] == pytest.approx(0.5)


def test_extension_stops_at_the_cap_and_the_row_is_untrustworthy():
    durations = [1.0, 1.2] * 20
    clock = ScriptedClock(durations)
    t = time_steps(clock.step, device="cpu", warmup=0, steps=4, max_steps=9, clock=clock)
    assert clock.num_calls == 9 and len(t.raw_s) == 9
    assert t.window_s == pytest.approx(durations[5:9])
    assert t.spread == pytest.approx(0.2 / np.median(durations[5:9])) and t.spread > MAX_SPREAD
    assert not t.trustworthy
    assert t.spread_all == pytest.approx(0.2 / np.median(durations[:9]))


def test_spread_all_of_unextended_timings_is_the_window_spread():
    clock = ScriptedClock([9.0, 1.0, 1.01, 0.99, 1.0])
    t = time_steps(clock.step, device="cpu", warmup=1, steps=4, max_steps=8, clock=clock)
    assert t.num_warmup == 1 and t.spread_all == pytest.approx(t.spread) == pytest.approx(0.02 / 1.0)
    hand = Timings(raw_s=(9.0, 2.0, 1.0, 1.0, 1.0), num_warmup=2, device="cpu")  # no configured count
    assert hand.spread_all == hand.spread == 0.0


def test_real_cpu_work_is_timed_with_perf_counter():
    a = torch.randn(128, 128)
    t = time_steps(lambda: a @ a, device="cpu", warmup=1, steps=3)
    assert len(t.raw_s) >= 4 and all(x > 0 for x in t.raw_s)
    assert t.to_dict()["device"] == "cpu"


def test_the_mean_of_every_timed_step_prices_a_job_and_one_step_is_never_trusted():
    """A stall every 6th step: the window it settles on is quiet, the mean pays the stalls."""
    times = iter([1.0] + [1.5 if i % 6 == 1 else 1.0 for i in range(40)])
    ticks = iter(x for t in times for x in (0.0, t))
    timings = time_steps(lambda: None, device="cpu", warmup=1, steps=5, max_steps=30, clock=lambda: next(ticks))
    assert timings.median_s == 1.0 and timings.trustworthy
    timed = timings.raw_s[1:]
    assert timings.mean_all_s == pytest.approx(sum(timed) / len(timed)) and timings.mean_all_s > 1.0
    one = time_steps(lambda: None, device="cpu", warmup=0, steps=1, clock=iter([0.0, 1.0]).__next__)
    assert one.spread == 0 and not one.trustworthy
