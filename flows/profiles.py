"""Profiles: named YAML files of stage params (DESIGN.md section 4).

A profile maps a stage name to overrides of that stage's params model::

    keychain: {n_examples: 8, target_tokens: [1024]}

``tiny`` is the embedded default (the whole pipeline on 2 CPU cores in minutes), ``small`` the scale at which a
pretrained ~135M base learns to call tools on 2 CPU cores, ``default`` and ``full`` scale up. ``extends: NAME`` builds
on another profile, section by section (``small`` is ``tiny`` with more data and its own sft recipe). A stage absent
from a profile runs with its params model's defaults. A path to a YAML file of the same shape is
accepted wherever a profile name is. Every section is validated against its stage's params model when loaded,
so a typo fails before anything runs, naming the stage, the field and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from data_contracts.stage import Params, StageError
from flows.registry import discover, stage_named

PROFILES = ("tiny", "small", "default", "full")

Overrides = Mapping[str, Mapping[str, Any]]


class ProfileError(StageError):
    """A profile is unknown, unreadable or has a section that does not fit its stage."""


def _profile_text(profile: str) -> tuple[str, str]:
    """(source description, YAML text) of a packaged profile name or a path to a YAML file."""
    if profile in PROFILES:
        return f"profile {profile!r}", resources.files("flows").joinpath("profiles", f"{profile}.yaml").read_text()
    path = Path(profile)
    if path.suffix in {".yaml", ".yml"} and path.is_file():
        return str(path), path.read_text()
    raise ProfileError(f"unknown profile {profile!r}; allowed: {', '.join(PROFILES)} or a path to a .yaml file")


def load_profile(profile: str, _seen: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """The raw sections of a profile (stage name -> params overrides), its ``extends`` chain merged in, checked for
    shape but not for values."""
    if profile in _seen:
        raise ProfileError(f"profile {profile!r} extends itself: {' -> '.join((*_seen, profile))}")
    source, text = _profile_text(profile)
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ProfileError(f"{source} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{source} must map stage names to params, got {type(data).__name__}")
    parent = data.pop("extends", None)
    if parent is not None and not isinstance(parent, str):
        raise ProfileError(f"{source}: extends must name one profile, got {parent!r}")
    for name, section in data.items():
        if not isinstance(section, dict):
            raise ProfileError(f"{source}: section {name!r} must map param names to values, got {section!r}")
    return data if parent is None else _merge(load_profile(parent, (*_seen, profile)), data)


def _merge(base: Overrides, extra: Overrides | None) -> dict[str, dict[str, Any]]:
    merged = {name: dict(section) for name, section in base.items()}
    for name, section in (extra or {}).items():
        merged[name] = deep_update(merged.get(name, {}), section)
    return merged


def deep_update(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` on top, nested settings merged field by field: overriding ``sampling.max_tokens``
    keeps the profile's ``sampling.max_turns``."""
    out = dict(base)
    for name, value in extra.items():
        out[name] = deep_update(out[name], value) if isinstance(value, Mapping) and isinstance(
            out.get(name), Mapping) else value
    return out


def stage_params(profile: str, overrides: Overrides | None = None) -> dict[str, dict[str, Any]]:
    """The validated raw params of the stages ``profile`` plus ``overrides`` name (a stage not named runs with its
    params model's defaults).

    Returns stage name -> the raw dict (the fields set by the profile or the overrides; the runner parses it and
    records every knob in the manifest). Raises ``ProfileError`` naming the stage, the field and what is allowed.
    """
    sections = _merge(load_profile(profile), overrides)
    for name in sections:
        try:
            stage_named(name)
        except StageError:
            raise ProfileError(f"profile {profile!r} names unknown stage {name!r}; known stages: "
                               f"{', '.join(sorted(discover()))}") from None
    for name, section in sections.items():
        parse(name, section)
    return sections


def parse(stage_name: str, raw: Mapping[str, Any]) -> Params:
    """Validate ``raw`` against the stage's params model; the error is one line (``gymforge params STAGE`` lists
    the fields)."""
    try:
        return stage_named(stage_name).parse_params(raw)
    except StageError as exc:
        raise ProfileError(str(exc)) from None
