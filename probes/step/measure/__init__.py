"""Measuring a step: the one timing helper (timing), kernel time from torch.profiler (kernels) and which module
launched it (attribution), kernels that fell back to reference code (kernel_watch), where a step waits for the
device (syncs), FLOPs for MFU (flops) and the datasheet peaks they are divided by (peaks)."""
