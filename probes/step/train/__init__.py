"""The training step the probes time: a checkpoint's config.json (checkpoint) and its decoder layers
(layer_types), parameter counts (params), what LoRA adapts (lora_targets), the harness contract (contract;
the reference harness is probes.step.harness), and the model built with LoRA, its batches and TrainStep
(models)."""
