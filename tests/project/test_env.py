"""Typed environment readers fail loudly on bad values."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from chatsite.env import env_bool, env_choice, env_float, env_int, env_list


def test_it_reads_typed_values(monkeypatch):
    monkeypatch.setenv("X_INT", "12")
    monkeypatch.setenv("X_BOOL", "off")
    monkeypatch.setenv("X_FLOAT", "0.5")
    monkeypatch.setenv("X_LIST", "a, b,,c")
    monkeypatch.setenv("X_CHOICE", " NGram ")
    assert env_int("X_INT", 1) == 12
    assert env_bool("X_BOOL", True) is False
    assert env_float("X_FLOAT", 1.0) == 0.5
    assert env_list("X_LIST", []) == ["a", "b", "c"]
    assert env_int("X_UNSET", 7) == 7
    assert env_choice("X_CHOICE", "off", {"off", "ngram"}) == "ngram"
    assert env_choice("X_UNSET", "off", {"off", "ngram"}) == "off"


@pytest.mark.parametrize(
    "reader, value",
    [
        (lambda: env_int("X_BAD", 1), "twelve"),
        (lambda: env_int("X_BAD", 1, minimum=5), "3"),
        (lambda: env_float("X_BAD", 1.0, maximum=2.0), "2.5"),
        (lambda: env_bool("X_BAD", True), "maybe"),
        (lambda: env_choice("X_BAD", "off", {"off", "ngram"}), "eagle"),
    ],
)
def test_it_names_the_variable_and_value_when_a_value_is_bad(monkeypatch, reader, value):
    monkeypatch.setenv("X_BAD", value)
    with pytest.raises(ImproperlyConfigured, match=f"X_BAD={value!r}"):
        reader()
