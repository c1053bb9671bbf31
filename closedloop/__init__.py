"""The ``closedloop`` console script: the one place that composes core, contracts and dashboards."""
