"""kiln-generate (issue 37): --help and its flag checks; the timing run itself is the bench's."""

import pytest

import kiln
from kiln.tools.kiln_generate import main


def test_help_names_the_flags(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--layers", "--hidden", "--heads", "--kv-heads", "--vocab", "--prompt-len", "--new-tokens",
                 "--batch", "--compare"):
        assert flag in out


@pytest.mark.parametrize("argv, message", [
    (["--hidden", "64", "--heads", "3"], "multiple of --heads 3"),
    (["--heads", "8", "--kv-heads", "3"], "multiple of --kv-heads 3"),
    (["--new-tokens", "0"], "--new-tokens must be at least 1"),
])
def test_bad_flags_are_kiln_errors(argv, message):
    with pytest.raises(kiln.KilnError, match=message):
        main(argv)
