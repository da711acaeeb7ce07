"""Profiles: packaged YAML files of stage params, validated against each stage's params model."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.profiles import PROFILES, ProfileError, load_profile, stage_params


@pytest.mark.parametrize("name", PROFILES)
def test_packaged_profiles_load(name: str) -> None:
    assert isinstance(load_profile(name), dict)
    stage_params(name)  # every section fits its stage


def _yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return str(path)


def test_a_profile_extends_another_section_by_section() -> None:
    tiny, small = load_profile("tiny"), load_profile("small")
    assert small["world"] == tiny["world"]  # what small does not name comes from tiny
    assert small["environments"] == {**tiny["environments"], "envs_per_domain": 12}  # a field, not the section
    assert small["sft"]["max_length"] != tiny["sft"]["max_length"] and small["sft"]["use_cpu"]


def test_a_profile_that_extends_itself_is_named(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(f"extends: {path}\n")
    with pytest.raises(ProfileError, match="extends itself"):
        load_profile(str(path))


def test_a_path_to_yaml_is_a_profile(tmp_path: Path) -> None:
    params = stage_params(_yaml(tmp_path, "test_double_source: {n: 3}\n"), {"test_double_source": {"bad_row": True}})
    assert params == {"test_double_source": {"n": 3, "bad_row": True}}  # a stage not named runs on its defaults


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        ("huge", ["unknown profile 'huge'", "tiny, small, default, full"]),
        ("extends: huge\n", ["unknown profile 'huge'"]),
        ("extends: [tiny, small]\n", ["extends must name one profile"]),
        ("test_double_nope: {}\n", ["unknown stage 'test_double_nope'", "known stages:", "test_double_source"]),
        ("test_double_source: {rows: 3}\n", ["test_double_source: rows is not a field",
                                               "`gymforge params test_double_source` lists them"]),
        ("test_double_source: {nn: 3}\n", ["test_double_source: nn is not a field (did you mean n?)"]),
        ("test_double_source: {n: many}\n", ["test_double_source: n='many'", "integer"]),
        ("test_double_source: 3\n", ["section 'test_double_source' must map"]),
        ("- a\n- b\n", ["must map stage names to params"]),
    ],
)
def test_bad_profiles_name_the_problem(tmp_path: Path, profile: str, expected: list[str]) -> None:
    source = profile if "\n" not in profile else _yaml(tmp_path, profile)
    with pytest.raises(ProfileError) as error:
        stage_params(source)
    for part in expected:
        assert part in str(error.value)
    assert "\n" not in str(error.value)  # one line, however many fields the stage has
