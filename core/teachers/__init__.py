"""Teachers: inference engines with their own weights that score the student's exact token ids.

``config`` (the ``[teachers]`` section: routes by domain, payload mode), ``compat`` (teacher /
student compatibility, checked before training), ``engine`` (a teacher engine and its
``prefill_and_score``), and ``routing`` (hard routes by domain, and a step's trajectories scored by
their routed teachers).
"""
