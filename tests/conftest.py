"""Shared pytest set-up: one torch thread per test process (the CI machine has 2 cores)."""

import torch

torch.set_num_threads(1)
