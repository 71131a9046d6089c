"""How the runner shows the `goodput` probe: the defaults (its answer's figures counted in the headline, compare
on the jobs' wall time). Its own command, `labprobe goodput`, is declared in the registry (probes/__init__)."""

from __future__ import annotations

from probes import Presentation

PRESENTATION = Presentation()
