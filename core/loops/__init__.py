"""The RL loops and their step parts: ``grpo`` (one synchronous step), ``async_grpo``, ``sao``,
``compaction_rl`` and ``critic_step`` (the critic-based update), over the shared ``step`` parts
(score, objective, update, metrics), ``session`` (what a run holds), ``loop`` (the outer loop),
``evaluate`` (held-out evaluation) and ``config`` (``[optim]``, ``[train]``)."""
