"""Contract check groups, one file per contract; importing this package registers them all."""

from contracts.checks import (  # noqa: F401  (registration side effects)
    action,
    agentic,
    long_horizon,
    memory,
    parallel,
    regression,
    reward,
    run,
    schema,
    sparse_version,
    teacher_provenance,
    teacher_quant,
)
