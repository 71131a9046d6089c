"""The `goodput` probe's answer: its summary's first scalar figures (epoch time, real tokens/s and budget
hours per batching strategy); no table of its own is read (runner.analysis shows it)."""

from probes.result import summary_answer

QUESTION, TABLES, EXACT, RATIO_OF, figures = summary_answer("goodput")
