"""The step kit: the harness contract and reference, models, FLOPs, timing, kernels, attribution, micro-benchmarks,
variants, the worker and its processes, what-if predictions; the model session (session), the scaling fit (fit),
the step-time model (steptime), the recorded forward (attention_calls) and the fast path's rules (fast_path).
Shared by the GPU probes; never imports a probe."""
