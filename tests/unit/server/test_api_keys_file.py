"""The API keys file of ``dcaf-like serve --api-keys-file``: what it holds, and each mistake named by
the file and the line, never by the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from dcaf_like.server.auth import ApiKeys, ApiKeysFileError, keys_from_file

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcd=ef"  # a key may hold '=' (base64 padding): the first one separates


def written(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "keys"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_one_key_a_line_with_comments_and_blank_lines(tmp_path):
    path = written(tmp_path, f"# who may use the agent\n\nalice={ALICE}\n  bob : chat + read = {BOB}  \n")

    keys = keys_from_file(path)

    assert keys == {ALICE: "alice", BOB: "bob : chat + read"}
    assert repr(ApiKeys(keys)) == "ApiKeys(2 keys)"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o700 | 0o001])
def test_a_file_anyone_but_its_owner_may_use_is_refused(tmp_path, mode):
    path = written(tmp_path, f"alice={ALICE}\n", mode)

    with pytest.raises(ApiKeysFileError) as refused:
        keys_from_file(path)

    assert str(refused.value) == (
        f"the API keys file {path} is open to other users (mode {mode:04o}): make it readable by its "
        f"owner only: chmod 600 {path}"
    )


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (f"alice {ALICE}", "expected identity[:scope+scope]=key"),
        (f"al ice={ALICE}", "an API key's identity is 1 to 64 letters"),
        (f"={ALICE}", "every API key needs the identity it stands for"),
        (f"alice:chat+rwite={ALICE}", "unknown scopes ['rwite'] for 'alice'; the scopes are admin, approve"),
        (f"policy={ALICE}", "'policy' names a decider in the records"),
        ("alice=", "the key of 'alice' is missing after '='"),
        ("alice=short-key", "the key of 'alice' is too short: use 16 characters or more"),
        (f"bob={ALICE}", "the same key as line 2; give each key once"),
    ],
)
def test_a_malformed_line_is_named_by_its_number_never_by_its_key(tmp_path, line, said):
    path = written(tmp_path, f"# keys\nalice={ALICE}\n\n{line}\n")

    with pytest.raises(ApiKeysFileError) as refused:
        keys_from_file(path)

    assert str(refused.value).startswith(f"{path}, line 4: {said}")
    assert ALICE not in str(refused.value)
    assert "short-key" not in str(refused.value)


def test_a_missing_or_empty_file_says_so(tmp_path):
    with pytest.raises(ApiKeysFileError, match=f"no API keys file at {tmp_path / 'absent'}"):
        keys_from_file(tmp_path / "absent")
    with pytest.raises(ApiKeysFileError, match="holds no key: write one identity"):
        keys_from_file(written(tmp_path, "# nobody yet\n\n"))
