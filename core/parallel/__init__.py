"""Megatron tensor parallelism on the CPU (gloo): process groups, weight sharding, vocab-parallel
log-probs and the TP training step. Imports megatron; not re-exported."""
