"""The HS256 fast path (bifrost.auth.fastjws) gives exactly PyJWT's verdicts: it accepts
only what PyJWT accepts, with the same payload, and hands everything else to PyJWT.

Each refusal path is checked twice: the fast path declines the token (returns None),
and the verifier with the fast path refuses it with the same message as without it.
A generated corpus (hypothesis) compares the two verifiers' verdicts token by token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bifrost.auth import JwtVerifier, mint_token
from bifrost.auth.fastjws import HEADERS, FastHs256, b64url
from bifrost.errors import Unauthenticated

KEY = b"fast-path-test-key-0123456789abcdef"
OLD_KEY = b"fast-path-previous-key-0123456789abc"
OTHER = b"some-other-key-0123456789abcdefghijk"
NOW = 1_800_000_000
BODY = b'{"wire_version":"0.6"}'
DIGEST = hashlib.sha256(BODY).hexdigest()


def verifiers(**kw: Any) -> tuple[JwtVerifier, JwtVerifier]:
    def make(fast: bool) -> JwtVerifier:
        return JwtVerifier(KEY, previous_keys=[OLD_KEY], clock=lambda: NOW, fast_path=fast, **kw)

    return make(True), make(False)


def verdict(verifier: JwtVerifier, token: str) -> tuple[str, Any]:
    try:
        pending = verifier.check_headers(token, plane="memory")
    except Unauthenticated as exc:
        return ("refused", str(exc))
    return ("accepted", pending)


def claims(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "iss": "heimdall",
        "aud": "ratatoskr",
        "sub": "agent",
        "iat": NOW,
        "exp": NOW + 60,
        "jti": "j-1",
        "bifrost": {"plane": "memory", "verb": "get", "body_sha256": DIGEST, "scope": {}},
    }
    out.update(over)
    return {k: v for k, v in out.items() if v is not _DROP}


_DROP = object()


def sign(header: bytes | str, payload: bytes | str, key: bytes = KEY) -> str:
    h = header if isinstance(header, str) else b64url(header)
    p = payload if isinstance(payload, str) else b64url(payload)
    mac = hmac.new(key, f"{h}.{p}".encode(), hashlib.sha256).digest()
    return f"{h}.{p}.{b64url(mac)}"


def compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


HS256 = b'{"alg":"HS256","typ":"JWT"}'


def same(token: str, *, declined: bool, **kw: Any) -> tuple[str, Any]:
    fast, slow = verifiers(**kw)
    assert (fast._fast.decode(token) is None) is declined
    a, b = verdict(fast, token), verdict(slow, token)
    assert a == b
    return a


def test_minted_tokens_take_the_fast_path_with_pyjwt_s_claims() -> None:
    token = mint_token(KEY, plane="memory", verb="get", body=BODY, actor="a", now=NOW)
    outcome = same(token, declined=False)
    assert outcome[0] == "accepted"
    assert outcome[1].claims.actor == "a"


def test_a_previous_key_takes_the_fast_path_too() -> None:
    assert same(sign(HS256, compact(claims()), OLD_KEY), declined=False)[0] == "accepted"


def test_bad_signature_is_pyjwt_s_refusal() -> None:
    assert same(sign(HS256, compact(claims()), OTHER), declined=True) == (
        "refused",
        "token signature invalid",
    )
    head, payload, sig = sign(HS256, compact(claims())).split(".")
    assert same(f"{head}.{payload}.{sig[:-4]}", declined=True)[0] == "refused"


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "none", "typ": "JWT"},
        {"alg": "none"},
        {"alg": "RS256", "typ": "JWT"},
        {"alg": "HS512", "typ": "JWT"},
        {"typ": "JWT"},
        {"alg": "HS256", "typ": "jwt"},
        {"alg": "HS256", "typ": "JOSE"},
        {"alg": "HS256", "typ": 1},
        {"alg": "HS256", "typ": "JWT", "kid": 7},
        {"alg": "HS256", "typ": "JWT", "kid": "k1"},
        {"alg": "HS256", "typ": "JWT", "crit": ["exp"]},
        {"alg": "HS256", "typ": "JWT", "b64": False, "crit": ["b64"]},
        {"alg": "HS256", "typ": "JWT", "x": 1},
    ],
)
def test_any_other_header_goes_to_pyjwt(header: dict[str, Any]) -> None:
    token = sign(compact(header), compact(claims()))
    same(token, declined=True)


def test_header_spelled_differently_goes_to_pyjwt() -> None:
    same(sign(b'{"alg": "HS256", "typ": "JWT"}', compact(claims())), declined=True)
    same(sign(b'{"alg":"HS256","alg":"HS256"}', compact(claims())), declined=True)


@pytest.mark.parametrize("claim", ["iss", "aud", "sub", "iat", "exp", "jti", "bifrost"])
def test_missing_or_null_claims(claim: str) -> None:
    assert same(sign(HS256, compact(claims(**{claim: _DROP}))), declined=True) == (
        "refused",
        f"token missing claim {claim}",
    )
    assert same(sign(HS256, compact(claims(**{claim: None}))), declined=True)[0] == "refused"


@pytest.mark.parametrize(
    "aud",
    [["ratatoskr"], ["ratatoskr", "other"], ["other"], [], "other", 1, {"a": 1}, "Ratatoskr"],
)
def test_audience_forms(aud: Any) -> None:
    assert same(sign(HS256, compact(claims(aud=aud))), declined=True)[0] == "refused"


@pytest.mark.parametrize(
    "over",
    [{"iss": "other"}, {"iss": 1}, {"sub": 1}, {"sub": ["a"]}, {"jti": 1}, {"jti": ["j"]}],
)
def test_issuer_subject_and_id_types(over: dict[str, Any]) -> None:
    assert same(sign(HS256, compact(claims(**over))), declined=True)[0] == "refused"


@pytest.mark.parametrize(
    "over",
    [
        {"exp": NOW - 31},
        {"exp": NOW - 29, "iat": NOW - 60},
        {"iat": NOW + 31, "exp": NOW + 90},
        {"nbf": NOW + 31},
        {"nbf": NOW + 29},
        {"nbf": "soon"},
        {"iat": "now"},
        {"exp": True},
        {"exp": NOW + 301},
        {"exp": NOW},
        {"iat": 1.5, "exp": 61.5},
        {"sub": ""},
        {"jti": ""},
        {"jti": "j" * 257},
        {"bifrost": {"plane": "affect", "verb": "get", "body_sha256": DIGEST, "scope": {}}},
        {"bifrost": "x"},
    ],
)
def test_time_skew_and_claim_values_decided_after_the_decode(over: dict[str, Any]) -> None:
    # Well-formed tokens: the fast path decodes them, the verifier's own checks judge
    # them exactly as on PyJWT's payload.
    same(sign(HS256, compact(claims(**over))), declined=False)


@pytest.mark.parametrize(
    "payload",
    [
        b'{"iss":"heimdall","exp":NaN}',
        b'{"iss":"heimdall","exp":1e400}',
        b'{"sub":"\\ud800"}',
        b'{"exp":18446744073709551617}',
        b"[1,2]",
        b'"text"',
        b"\xef\xbb\xbf{}",
        b"",
        b"[" * 40 + b"]" * 40,
    ],
)
def test_payloads_orjson_reads_differently_go_to_pyjwt(payload: bytes) -> None:
    same(sign(HS256, payload), declined=True)


def test_big_integer_claims_are_pyjwt_s() -> None:
    big = compact(claims())[:-1] + b',"nbf":18446744073709551617}'
    same(sign(HS256, big), declined=True)


def test_duplicate_claims_read_as_pyjwt_reads_them() -> None:
    dup = compact(claims())[:-1] + b',"sub":"second"}'
    outcome = same(sign(HS256, dup), declined=False)
    assert outcome[1].claims.actor == "second"


def test_padded_or_non_canonical_base64url_goes_to_pyjwt() -> None:
    good = sign(HS256, compact(claims()))
    head, payload, sig = good.split(".")
    padded = payload + "=" * (-len(payload) % 4)
    # A last character with stray low bits decodes to the same bytes but is not canonical.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    stray = sig[:-1] + alphabet[alphabet.index(sig[-1]) ^ 1]
    for token in (
        f"{head}.{padded}.{sig}" if padded != payload else f"{head}.{payload}=.{sig}",
        f"{head}.{payload}.{sig}=",
        f"{head}.{payload}.{stray}",
        f"{head}.{payload}.{sig}A",
        f"{head}.{payload.replace('-', '+')}.{sig}"
        if "-" in payload
        else f"{head}+.{payload}.{sig}",
        f"{head}.{payload}!.{sig}",
        f"{head}. {payload}.{sig}",
        f"{head}.{payload}.{sig}.",
        f"{head}..{sig}",
        f".{payload}.{sig}",
        f"{head}.{payload}",
        f"{head}.{payload}.{sig}.{sig}",
        f"{head}.{payload}.{sig}\u00e9",
    ):
        same(token, declined=True)  # PyJWT's verdict (it accepts correct padding)


def test_keys_pyjwt_would_judge_disable_the_fast_path() -> None:
    short = b"short-key"
    pem = b"-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----"
    for key in (short, pem):
        fast = FastHs256([key], issuer="heimdall", audience="ratatoskr", required=["iss"])
        assert not fast.enabled
    assert FastHs256([KEY], issuer="i", audience="a", required=[]).enabled


def test_the_header_encodings_decode_to_hs256() -> None:
    for segment in HEADERS:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
        assert header["alg"] == "HS256" and set(header) <= {"alg", "typ"}


# -- a generated corpus --------------------------------------------------------------------

_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([NOW, NOW - 100, NOW + 29, NOW + 31, NOW + 60, NOW + 400, 0.5, 1e300]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(["heimdall", "ratatoskr", "agent", ""]),
    st.lists(st.sampled_from(["ratatoskr", "other"]), max_size=3),
)
_claim_names = st.sampled_from(["iss", "aud", "sub", "iat", "exp", "nbf", "jti", "bifrost", "x"])


@st.composite
def _tokens(draw: st.DrawFn) -> str:
    payload = claims()
    for name in draw(st.lists(_claim_names, max_size=3)):
        if draw(st.booleans()):
            payload.pop(name, None)
        else:
            payload[name] = draw(_values)
    header: dict[str, Any] = {"alg": "HS256", "typ": "JWT"}
    if draw(st.integers(0, 3)) == 0:
        header["alg"] = draw(st.sampled_from(["none", "RS256", "HS512", "HS256", ""]))
    if draw(st.integers(0, 3)) == 0:
        header.update(draw(st.dictionaries(st.sampled_from(["typ", "kid", "crit", "x"]), _values)))
    key = draw(st.sampled_from([KEY, KEY, OLD_KEY, OTHER]))
    token = sign(compact(header), compact(payload), key)
    edit = draw(st.integers(0, 5))
    if edit == 0:  # one character replaced, inserted or removed anywhere
        pos = draw(st.integers(0, len(token) - 1))
        char = draw(st.sampled_from([*"A_-+/=.! a", "\u00e9"]))
        how = draw(st.integers(0, 2))
        token = (
            token[:pos] + char + token[pos + 1 :]
            if how == 0
            else token[:pos] + char + token[pos:]
            if how == 1
            else token[:pos] + token[pos + 1 :]
        )
    return token


@settings(max_examples=400, deadline=None)
@given(_tokens())
@pytest.mark.slow
def test_generated_tokens_get_the_same_verdict(token: str) -> None:
    fast, slow = verifiers()
    assert verdict(fast, token) == verdict(slow, token)
