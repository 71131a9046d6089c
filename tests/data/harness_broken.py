"""A harness with a syntax error: the probes must refuse it by name, without a traceback."""


def discover_target_modules(model) -> list[str]:
    return ["q_proj"


def compute_loss(model, batch):
    return None
