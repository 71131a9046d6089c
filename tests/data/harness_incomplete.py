"""A harness that forgot compute_loss: the probes must refuse it by name."""


def discover_target_modules(model) -> list[str]:
    return ["q_proj"]
