"""Hard routing: each sample goes to the one teacher of its domain (``teachers.routes``).

A domain without a route (and no ``"*"`` route) is scored by no teacher: its samples carry a null
teacher id and no teacher log-probs, and receive no OPD advantage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from core.teachers.config import WILDCARD


def route(domains: Sequence[str], routes: Mapping[str, str]) -> list[str | None]:
    """Per sample, the teacher id its domain routes to (``routes``: domain -> teacher id)."""
    default = routes.get(WILDCARD)
    return [routes.get(d, default) for d in domains]


def load_teachers(cfg, *, repo_root: Path, **student) -> tuple[dict[str, str], dict[str, object]]:
    """The ``[teachers]`` section's routes and engines: (domain -> teacher id, teacher id ->
    ``TeacherEngine``); a checkpoint routed from several domains is loaded once.

    ``student``: the student's ``tokenizer_rev``, ``vocab_hash``, ``chat_template_rev`` and
    ``vocab_size`` for the compatibility check (``TeacherIncompatible``).
    """
    from core.teachers.engine import TeacherEngine

    routes: dict[str, str] = {}
    by_path: dict[Path, TeacherEngine] = {}
    for domain, raw in cfg.routes.items():
        path = Path(raw) if Path(raw).is_absolute() else repo_root / raw
        if path not in by_path:
            if not (path / "config.json").is_file():
                raise FileNotFoundError(
                    f"teachers.routes[{domain!r}]: no checkpoint at {path}; train the teacher "
                    "first (docs/teachers.md: the expert commands)"
                )
            by_path[path] = TeacherEngine.from_checkpoint(
                path, precision=cfg.precision, engine=cfg.engine, **student
            )
        routes[domain] = by_path[path].teacher_id
    return routes, {t.teacher_id: t for t in by_path.values()}
