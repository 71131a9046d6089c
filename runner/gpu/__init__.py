"""GPU idleness observed on the GPU itself: NVML samples, runs-dir freshness, the verdict."""
