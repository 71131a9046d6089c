"""The `replay` probe's answer: its summary's first scalar figures (measured against predicted step time
over the corpus's real batch shapes); no table of its own is read (runner.analysis shows it)."""

from probes.result import summary_answer

QUESTION, TABLES, EXACT, RATIO_OF, figures = summary_answer("replay")
