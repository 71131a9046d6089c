"""How the runner shows the `profile` probe: its headline (step time, the quadratic share, the padding
penalty), the fit's terms as compare's default, history's table, and the report's sections: step-time scaling
curves with the fit, and kernel time by category."""

from __future__ import annotations

from probes import CategoryBars, Presentation, ScalingCurves
from probes.format import span


def headline(rows: list[dict]) -> str:
    parts = [
        ("step", span(rows, "step_s", " s")),
        ("quadratic share at seq_len", span(rows, "quadratic_pct", "%")),
        ("padding penalty (same shape)", span(rows, "penalty_same_shape_pct", "%")),
    ]
    text = "; ".join(f"{name} {value}" for name, value in parts if value != "-") or "no figure"
    return text[:1].upper() + text[1:] + "."


PRESENTATION = Presentation(
    headline=headline,
    compare=(("fit", "coef"), ("scaling", "step_s")),
    history_table="scaling",
    sections=(
        ScalingCurves(
            table="scaling",
            title="Step-time scaling per host",
            x=("seq_len", "num_tokens", "tokens_per_step", "length"),
            y="step_s",
            fit="fit_s",
        ),
        CategoryBars(
            table="kernels",
            title="Kernel time by category",
            category="category",
            value="kernel_s_per_step",
            scale=1e3,
            unit="ms per step",
            table_unit="ms/step",
        ),
    ),
)
