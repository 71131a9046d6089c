"""How the runner shows the `replay` probe: the defaults (its answer's figures counted in the headline, compare
on the jobs' wall time, its tables in the report's other tables)."""

from __future__ import annotations

from probes import Presentation

PRESENTATION = Presentation()
