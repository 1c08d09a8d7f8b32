"""The dashboard's HS256 tokens: what verifies, what is refused, and the key file's rules."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from gateway.dashboard.auth import (
    TokenError,
    bearer_from,
    issue_token,
    load_key,
    verify_token,
)
from gateway.dashboard.settings import dashboard_settings

KEY = b"k" * 32


def _part(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_a_token_names_its_user_until_it_expires() -> None:
    token = issue_token(KEY, "root", 60, now=1000.0)
    who = verify_token(KEY, token, now=1059.0)
    assert (who.user, who.uid, who.expires) == ("root", 0, 1060.0)
    with pytest.raises(TokenError, match="expired"):
        verify_token(KEY, token, now=1060.0)


def test_claims_are_slurms() -> None:
    body = issue_token(KEY, "root", 30, now=100.0).split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert claims == {"iat": 100, "exp": 130, "sun": "root"}


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("", "no token"),
        ("a.b", "three parts"),
        (f"{_part({'alg': 'none'})}.{_part({'sun': 'root', 'exp': 9e9})}.", "algorithm"),
        (f"{_part({'alg': 'HS512'})}.{_part({'sun': 'root', 'exp': 9e9})}.x", "algorithm"),
        ("x" * 5000, "too long"),
    ],
)
def test_malformed_tokens_are_refused(token: str, why: str) -> None:
    with pytest.raises(TokenError, match=why):
        verify_token(KEY, token, now=1.0)


def test_a_token_signed_with_another_key_or_changed_is_refused() -> None:
    token = issue_token(b"o" * 32, "root", 60, now=0.0)
    with pytest.raises(TokenError, match="signature"):
        verify_token(KEY, token, now=1.0)
    head, _, sig = issue_token(KEY, "nobody", 60, now=0.0).split(".")
    changed = f"{head}.{_part({'sun': 'root', 'exp': 60, 'iat': 0})}.{sig}"
    with pytest.raises(TokenError, match="signature"):
        verify_token(KEY, changed, now=1.0)


def test_unknown_users_and_missing_expiry_are_refused() -> None:
    with pytest.raises(TokenError, match="unknown user"):
        verify_token(KEY, issue_token(KEY, "no-such-user-here", 60, now=0.0), now=1.0)
    head = _part({"alg": "HS256", "typ": "JWT"})
    import hashlib
    import hmac

    body = _part({"sun": "root"})
    sig = hmac.new(KEY, f"{head}.{body}".encode(), hashlib.sha256).digest()
    token = f"{head}.{body}.{base64.urlsafe_b64encode(sig).rstrip(b'=').decode()}"
    with pytest.raises(TokenError, match="exp"):
        verify_token(KEY, token, now=1.0)


def test_the_key_is_made_private_and_an_open_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "jwt_hs256.key"
    key = load_key(path)
    assert len(key) == 32
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_key(path) == key
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match="0600"):
        load_key(path)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(OSError, match=r"symbolic|Too many"):
        load_key(link)


def test_bearer_and_slurmrestd_headers() -> None:
    assert bearer_from({"authorization": "Bearer abc"}) == "abc"
    assert bearer_from({"x-slurm-user-token": "def"}) == "def"
    assert bearer_from({"authorization": "Basic abc"}) is None
    assert bearer_from({}) is None


def test_dashboard_settings_are_checked(tmp_path: Path) -> None:
    s = dashboard_settings(tmp_path, {"listen": "127.0.0.1:6821"})
    assert s.listen == ("127.0.0.1", 6821)
    assert s.key_path == tmp_path / "jwt_hs256.key"
    assert dashboard_settings(tmp_path, None).listen is None
    with pytest.raises(ValueError, match="unknown setting"):
        dashboard_settings(tmp_path, {"lisen": "x:1"})
    with pytest.raises(ValueError, match="HOST:PORT"):
        dashboard_settings(tmp_path, {"listen": "6821"})
    with pytest.raises(ValueError, match="must be a table"):
        dashboard_settings(tmp_path, "127.0.0.1:1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="port"):
        dashboard_settings(tmp_path, {"listen": "h:99999"})


def test_a_token_lives_at_least_its_lifespan() -> None:
    token = issue_token(KEY, "root", 1, now=100.9)
    assert verify_token(KEY, token, now=101.8).user == "root"
    with pytest.raises(TokenError, match="expired"):
        verify_token(KEY, token, now=102.0)
