"""minijson agrees with the json module on everything the API carries, and refuses junk."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.cli import minijson

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def test_the_c_accelerator_is_in_use() -> None:
    assert minijson.loads is not json.loads


@given(_values)
def test_round_trips_like_json(value: object) -> None:
    text = minijson.dumps(value)
    assert json.loads(text) == value
    assert minijson.loads(json.dumps(value)) == value
    assert minijson.loads(text) == value


@given(st.text(max_size=40))
def test_junk_is_a_value_error_or_a_value(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError, match="malformed JSON"):
            minijson.loads(text)
    else:
        if text[:1].isspace():  # the gateway never answers with leading blanks
            return
        assert json.dumps(minijson.loads(text)) == json.dumps(expected)  # NaN != NaN


def test_lone_surrogates_from_undecodable_scripts_survive() -> None:
    script = b"#!/bin/sh\necho \xff\n".decode("utf-8", "surrogateescape")
    assert minijson.loads(minijson.dumps({"script": script})) == {"script": script}
