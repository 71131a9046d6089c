"""The step-time model: the scaling fit of step time against sequence length (fit), a host x checkpoint's step
time as a function of the batch shape (model: goodput prices hours with it, replay checks it), and a stack's
measured step over the baseline's that scales it (stack_step)."""
