"""The telemetry rows a training step writes, built in one place: ``rows`` (samples, tokens, reward
components, the steps row, teacher routes), ``sparse`` (train vs rollout DSA selections and MoE
routes: capture, agreement, rows) and ``agent`` (the async loop's turns and per-worker syncs)."""
