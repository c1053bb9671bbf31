"""Mixed rewards: R = Σ_k w_k R_k − Σ_j λ_j P_j from traceable components.

``config`` (the ``[rewards]`` section), ``rules`` (format reward, length penalty), ``orm`` (the
outcome reward model), ``judge`` (the generative judge and its verdict parser), ``mix`` (the
scalarization over a step's trajectories), ``data`` (verified rollouts read from runs) and
``train`` / ``cli`` (the commands that train the ORM and the judge).
"""
