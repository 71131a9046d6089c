"""The step's named choices that a probe's Config checks its fields against, without torch: the reference
harness's module and cross-entropy chunk, where weights come from, how a measured batch's rows are filled. The
modules that use them (probes.step.harness, probes.step.train.models) import torch; the Configs that name them
must not, so a sweep's driver and `labprobe validate` read a plan without importing it."""

from __future__ import annotations

from typing import Literal

REFERENCE = "probes.step.harness"
"""The reference harness, by module path: a lab's is given the same way. It and CHUNK_TOKENS are the harness's own
(probes.step.harness.REFERENCE, .CHUNK_TOKENS), copied here rather than moved: the harness's source is hashed into
every result (`harness_sha256`), and a moved line would read in `compare` as a harness change
(tests/probes/step/test_harness.py checks the copies agree)."""
CHUNK_TOKENS = 1024
"""Default cross-entropy chunk: 1,024 tokens x 151,936 (Qwen3 vocab) x 4 B = 0.58 GiB fp32 logits."""
Weights = Literal["checkpoint", "random"]
ROWS = ("full", "packed")
"""How a measured batch's rows are filled (probes.step.variants.measurement.Spec.rows)."""
