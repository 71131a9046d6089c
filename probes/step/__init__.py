"""The step kit: the harness contract and reference, models, FLOPs, timing, kernels, attribution, micro-benchmarks,
variants, the worker and its processes, what-if predictions. Shared by the GPU probes; never imports a probe."""
