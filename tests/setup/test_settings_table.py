"""Each setting is declared once, in the settings table: the ``Settings`` type names and
types the fields and repeats no default; ``configure()``'s keywords are the table's
argument settings; what each resolves to by default is the table's default."""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import pytest

from otel_rollout import configure
from otel_rollout._settings.table import BY_NAME, SETTINGS, Settings, resolve

#: configure() keywords that are not settings: they say how to set up, not what.
NOT_SETTINGS = {"local", "on_breakdown", "summary_stream"}


def test_the_settings_type_has_one_field_per_setting_and_no_default_of_its_own():
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    assert set(fields) - {"sources"} == set(BY_NAME)
    with_defaults = [
        name
        for name, f in fields.items()
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    ]
    assert with_defaults == [], f"defaults belong in SETTINGS, not in Settings: {with_defaults}"


def test_configure_keywords_are_exactly_the_argument_settings():
    params = inspect.signature(configure).parameters
    keywords = set(params) - NOT_SETTINGS
    assert keywords == {s.name for s in SETTINGS if s.argument}
    assert all(params[k].default is None for k in keywords), "None means: not given"


def test_with_nothing_given_every_setting_is_its_table_default():
    settings = resolve()
    for s in SETTINGS:
        assert settings.sources[s.name] == "default", s.name
        if not callable(s.default):  # a drawn run id, one derived from another setting
            value = getattr(settings, s.name)
            assert value == s.default or str(value) == str(s.default), s.name


def test_a_misspelled_variable_warns_once_naming_the_nearest_setting(monkeypatch):
    from otel_rollout._settings import spelling

    monkeypatch.setattr(spelling, "_warned", set())
    monkeypatch.setenv("OTEL_ROLLOUT_SAMPLE_RATE", "0.1")
    with pytest.warns(UserWarning, match="OTEL_ROLLOUT_SAMPLE_RATE .*OTEL_ROLLOUT_SAMPLE_RATIO"):
        resolve()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve()  # once per process


def test_a_variable_far_from_every_setting_is_someone_elses_and_left_alone(monkeypatch):
    from otel_rollout._settings import spelling

    monkeypatch.setattr(spelling, "_warned", set())
    monkeypatch.setenv("OTEL_ROLLOUT_CI_CACHE", "/tmp")
    monkeypatch.setenv("OTEL_ROLLOUT_JAEGER_URL", "http://x")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve()
