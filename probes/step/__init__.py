"""The step kit: what the GPU probes (profile, carrier, replay; goodput reads its step-time model) share, one
package per concept. Never imports a probe.

- `harness` (a module): the reference harness. Its import path is public: `--harness` defaults to it, stored
  results name it in `harness`, and a lab's harness imports its pieces from it, so it stays here.
- `config` (StepConfig: the fields every step-running probe shares) and `session` (a model built once, timed
  and profiled in this process): the packages below put together for a probe.
- `train/`: the training step itself: the checkpoint's config and layers, parameter counts, what LoRA adapts,
  the harness contract, the model built with LoRA, its batches and TrainStep.
- `measure/`: measuring a step: the timing helper, kernels from torch.profiler and their attribution, the
  kernels' fallbacks, the sync census, FLOPs and datasheet peaks.
- `variants/`: changes to the step and stacks of them, each measured in a fresh worker process; their
  what-if predictions, numerics price and the search for the fastest stack.
- `steptime/`: the step-time model: the scaling fit, the model goodput prices with and replay checks, and
  a stack's factor on it.
- `masking/`: the recorded forward's attention calls and SDPA's fast-path rules (the mask probe; profile).
"""
