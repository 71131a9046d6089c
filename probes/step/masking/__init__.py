"""Mask support: the recorded forward, every attention call a model's own forward makes on a probe batch
(attention_calls), and SDPA's maskless fast path by torch's rules (fast_path). The mask probe reads them
layer by layer; profile asks whether a case keeps the fast path."""
