"""An incompatible teacher is refused before training, with an error naming what differs."""

from __future__ import annotations

import pytest

from core.cli import main
from core.teachers.compat import TeacherIncompatible
from core.teachers.engine import TeacherEngine
from core.tokenizer.chat_template import CHAT_TEMPLATE_REV
from core.tokenizer.tokenizer import Tokenizer
from tests.teacher_artifacts import teacher_checkpoint


def _load(path):
    tok = Tokenizer.load()
    return TeacherEngine.from_checkpoint(
        path,
        tokenizer_rev=tok.revision,
        vocab_hash=tok.vocab_hash,
        chat_template_rev=CHAT_TEMPLATE_REV,
        vocab_size=tok.vocab_size,
    )


def test_a_compatible_teacher_loads_with_its_id(tmp_path):
    t = _load(teacher_checkpoint(tmp_path / "addition"))
    assert t.teacher_id.startswith("addition@") and len(t.teacher_id) == len("addition@") + 8


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tokenizer_rev", "0" * 64, "tokenizer_rev 000000000000 != student's"),
        ("vocab_hash", "f" * 64, "vocab_hash ffffffffffff != student's"),
        ("chat_template_rev", "a" * 64, "chat_template_rev aaaaaaaaaaaa"),
        ("vocab_hash", None, "records no vocab_hash"),
    ],
)
def test_incompatible_metadata_is_refused(tmp_path, field, value, message):
    path = teacher_checkpoint(tmp_path / "t", **{field: value})
    with pytest.raises(TeacherIncompatible, match=message) as e:
        _load(path)
    assert "teacher 't@" in str(e.value)


def test_train_refuses_an_incompatible_teacher_with_exit_code_2(tmp_path, capsys):
    path = teacher_checkpoint(tmp_path / "other-tok", tokenizer_rev="0" * 64)
    rc = main(
        [
            "train",
            "--telemetry",
            "none",
            "--run-dir",
            str(tmp_path / "runs"),
            "--steps",
            "1",
            "--set",
            'algorithm.advantage="opd"',
            "--set",
            "algorithm.group_size=1",
            "--set",
            f'teachers.routes={{"*" = "{path}"}}',
        ]
    )
    assert rc == 2
    assert "incompatible with the student: tokenizer_rev" in capsys.readouterr().err


def test_a_missing_teacher_names_the_route(tmp_path, capsys):
    rc = main(
        [
            "train",
            "--telemetry",
            "none",
            "--run-dir",
            str(tmp_path / "runs"),
            "--steps",
            "1",
            "--set",
            f'teachers.routes={{addition = "{tmp_path / "nowhere"}"}}',
        ]
    )
    assert rc == 2
    assert "teachers.routes['addition']: no checkpoint at" in capsys.readouterr().err
