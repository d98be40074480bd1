"""A typo of a command, a layout or a format gets the nearest allowed value (issue 44, item 7)."""

from __future__ import annotations

import pytest

from benchbench.cli import main


@pytest.mark.parametrize("argv, hint", [
    (["tabel", "x"], "did you mean 'table'?"),
    (["db", "qurey"], "did you mean 'query'?"),
    (["table", "x", "--layout", "model"], "did you mean 'models'?"),
    (["table", "x", "--format", "mardown"], "did you mean 'markdown'?"),
])
def test_an_invalid_choice_says_the_nearest(capsys, argv, hint):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and err.rstrip().endswith(hint) and "Traceback" not in err


def test_no_hint_where_nothing_is_near(capsys):
    with pytest.raises(SystemExit):
        main(["zzzzzzzz"])
    assert "did you mean" not in capsys.readouterr().err
