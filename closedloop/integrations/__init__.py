"""Integrations that record other trainers' runs as closedloop runs (``trl``: TRL's
``GRPOTrainer``). Each imports its trainer's package lazily."""
