"""A lengths file (Parquet: `length`, optional `source`), the corpus probes' input without a tokenizer."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_lengths(path: Path, lengths, sources=None) -> Path:
    columns = {"length": list(lengths)}
    if sources is not None:
        columns["source"] = list(sources)
    pq.write_table(pa.table(columns), path)
    return path
