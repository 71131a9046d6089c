"""Fingerprints of a host's checkpoints: an unreadable one is a typed value with its reason, never a
string that could pass for a fingerprint."""

from __future__ import annotations

import json

from runner.store.fingerprint import Unreadable, fingerprint, fingerprints


def test_an_unreadable_checkpoint_is_an_unreadable_value_with_its_reason(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 64}))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    got = fingerprints({"good": str(good), "missing": str(tmp_path / "missing"), "broken": str(tmp_path / "broken")})
    assert got["good"] == fingerprint(good) and isinstance(got["good"], str)
    for name in ("missing", "broken"):
        assert isinstance(got[name], Unreadable), got[name]
        assert name in got[name].reason and "\n" not in got[name].reason
