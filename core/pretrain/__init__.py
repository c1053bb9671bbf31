"""The base models' recipes (``closedloop pretrain``): supervised fine-tuning (``sft``) of the
arithmetic, tool-use and long-horizon base policies on flawed-teacher corpora (``corpus``,
``longhorizon_teacher``), so each base model leaves RL something to fix; and the shipped
tokenizer's training (``tokenizer``)."""
