"""Service configuration: defaults, then the TOML file, then ``MBEACON_*`` variables, then overrides;
bad values are refused at start-up with the file and the field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from mbeacon.beacon.config import ConfigError, ServiceConfig, dataset_policy, load_config
from mbeacon.beacon.sanitisers import account_params, sanitiser_of


def write(tmp_path: Path, text: str, name: str = "mbeacon.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_file_or_environment() -> None:
    config = load_config(None, env={})
    assert config == ServiceConfig()
    assert config.defaults == dataset_policy()
    assert config.policy("anything") == config.defaults
    # a policy that names no mechanism protects the cohort as a whole
    assert (config.anonymous, config.metrics_public, config.defaults.mechanism) == (
        "refuse",
        False,
        "cohort-pmw",
    )


def test_layers_file_then_environment_then_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
beacon_name = "from the file"
beacon_id = "org.example.file"
rate_limit_per_minute = 100
max_batch = 50
environment = "test"

[defaults]
epsilon = 2.0
c = 4
""",
    )
    env = {
        "MBEACON_RATE_LIMIT_PER_MINUTE": "50",
        "MBEACON_METRICS_PUBLIC": "true",
        "MBEACON_BEACON_ID": "org.env",
    }
    config = load_config(path, env=env, overrides={"beacon_id": "org.override", "max_batch": 7})
    assert config.beacon_name == "from the file"  # file over defaults
    assert config.environment == "test"
    assert config.rate_limit_per_minute == 50  # environment over file
    assert config.metrics_public is True
    assert config.beacon_id == "org.override"  # overrides over everything
    assert config.max_batch == 7
    assert (config.defaults.epsilon, config.defaults.c) == (2.0, 4)
    assert config.organization_name == ServiceConfig().organization_name  # untouched: the default


def test_config_file_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, 'beacon_name = "named by MBEACON_CONFIG"\n')
    assert load_config(None, env={"MBEACON_CONFIG": str(path)}).beacon_name == "named by MBEACON_CONFIG"
    other = write(tmp_path, 'beacon_name = "explicit"\n', "other.toml")
    assert load_config(other, env={"MBEACON_CONFIG": str(path)}).beacon_name == "explicit"


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("yes", True), ("TRUE", True), ("0", False),
                                                 ("false", False), ("off", False)])  # fmt: skip
def test_boolean_environment_values(value: str, expected: bool) -> None:
    assert load_config(None, env={"MBEACON_METRICS_PUBLIC": value}).metrics_public is expected


def test_dataset_tables_inherit_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[defaults]
epsilon = 2.0
c = 3
tier = "CONTROLLED"
on_exhausted = "prior"

[datasets.cohort-a]
epsilon = 4.0

[datasets.cohort-b]
mechanism = "svt2"
tier = "PUBLIC"
count_epsilon = 0.5
""",
    )
    config = load_config(path, env={})
    a, b = config.policy("cohort-a"), config.policy("cohort-b")
    assert (a.epsilon, a.c, a.tier, a.on_exhausted) == (4.0, 3, "CONTROLLED", "prior")
    assert (b.epsilon, b.c, b.tier, b.count_epsilon) == (2.0, 3, "PUBLIC", 0.5)
    assert config.policy("not-configured") == config.defaults
    assert config.defaults.tier == "CONTROLLED"


def test_override_dataset_tables_inherit_override_defaults() -> None:
    config = load_config(
        None,
        env={},
        overrides={"defaults": {"c": 3, "epsilon": 2.0}, "datasets": {"x": {"tier": "CONTROLLED"}}},
    )
    assert (config.policy("x").c, config.policy("x").epsilon) == (3, 2.0)


def test_environment_does_not_reach_dataset_policies() -> None:
    config = load_config(None, env={"MBEACON_DEFAULTS": "epsilon=50", "MBEACON_DATASETS": "x"})
    assert config.defaults == dataset_policy() and config.datasets == {}


@pytest.mark.parametrize(
    ("toml", "where", "what"),
    [
        ("[defaults]\nepsilon = 0\n", "defaults.epsilon", "greater than 0"),
        ("[defaults]\nepsilon = -1.5\n", "defaults.epsilon", "greater than 0"),
        ("[datasets.demo]\nepsilon = 0\n", "datasets.demo.epsilon", "greater than 0"),
        ("[datasets.demo]\nepsilonn = 1.0\n", "datasets.demo.epsilonn", "Extra inputs are not permitted"),
        ("beacon_nmae = 'typo'\n", "beacon_nmae", "Extra inputs are not permitted"),
        ("[datasets.demo]\nepsilon = 1.0\ncount_epsilon = 1.0\n", "datasets.demo", "count_epsilon"),
        ("[datasets.demo]\nepsilon = 1.0\ncount_epsilon = 3.0\n", "datasets.demo", "count_epsilon"),
        ("[defaults]\nmechanism = 'none'\n", "defaults", "allow_unprotected"),
        ("[datasets.demo]\nmechanism = 'none'\n", "datasets.demo", "allow_unprotected"),
        ("[datasets.demo]\nc = 0\n", "datasets.demo.c", "greater than or equal to 1"),
        ("[datasets.demo]\nscope = 'planet'\n", "datasets.demo.scope", "'user', 'group' or 'global'"),
        ("[datasets.demo]\ntier = 'SECRET'\n", "datasets.demo.tier", "PUBLIC"),
        ("rate_limit_per_minute = -1\n", "rate_limit_per_minute", "greater than or equal to 0"),
        ("anonymous = 'everyone'\n", "anonymous", "'refuse' or 'shared'"),
    ],
)
def test_bad_values_name_the_file_and_the_field(tmp_path: Path, toml: str, where: str, what: str) -> None:
    path = write(tmp_path, toml)
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={})
    message = str(raised.value)
    assert str(path) in message
    assert f"  {where}: " in message, message
    assert what in message, message


def test_every_mistake_is_reported_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path, "[datasets.a]\nepsilon = 0\n[datasets.b]\nmechanism = 'none'\n[datasets.c]\nfoo = 1\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={})
    message = str(raised.value)
    for where in ("datasets.a.epsilon", "datasets.b", "datasets.c.foo"):
        assert where in message


def test_unprotected_needs_explicit_consent(tmp_path: Path) -> None:
    path = write(tmp_path, "[datasets.eval]\nmechanism = 'none'\nallow_unprotected = true\n")
    assert load_config(path, env={}).policy("eval").mechanism == "none"
    with pytest.raises(ConfigError, match="allow_unprotected"):
        load_config(None, env={}, overrides={"defaults": {"mechanism": "none"}})


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[defaults\nepsilon = = 1\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={})
    assert str(path) in str(raised.value) and "not valid TOML" in str(raised.value)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(ConfigError, match="configuration file not found") as raised:
        load_config(missing, env={})
    assert str(missing) in str(raised.value)
    with pytest.raises(ConfigError, match=r"nowhere\.toml"):
        load_config(None, env={"MBEACON_CONFIG": str(missing)})


def test_bad_environment_value_names_the_field() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, env={"MBEACON_RATE_LIMIT_PER_MINUTE": "lots"})
    message = str(raised.value)
    assert "MBEACON_" in message and "rate_limit_per_minute" in message


def test_config_is_immutable() -> None:
    config = load_config(None, env={})
    with pytest.raises(ValueError, match="frozen"):
        config.beacon_name = "changed"
    with pytest.raises(ValueError, match="frozen"):
        config.defaults.epsilon = 50.0


def test_sanitiser_parameters_are_read_and_priced(tmp_path: Path) -> None:
    from mbeacon.beacon.budget import AccountParams

    text = (
        "[datasets.m]\nmechanism = 'svt2-margin'\nmargin_above = 2.5\nmargin_below = 0.5\n"
        "[datasets.n]\nmechanism = 'svt2-noisy'\nepsilon = 8.0\nrelease_share = 0.25\n"
        "[datasets.d]\nmechanism = 'svt2-noisy'\n"
    )
    config = load_config(write(tmp_path, text), env={})
    margin = account_params(config.policy("m"))
    assert (margin.margin_above, margin.margin_below, margin.epsilon3) == (2.5, 0.5, 0.0)
    noisy = account_params(config.policy("n"))
    assert noisy.epsilon3 == pytest.approx(2.0)
    assert 2 * (noisy.epsilon1 + noisy.epsilon2) + noisy.epsilon3 == pytest.approx(8.0)
    assert sanitiser_of(noisy.mechanism).mechanism_params(noisy).epsilon == pytest.approx(
        8.0
    )  # the privacy layer's own accounting agrees
    assert account_params(config.policy("d")).epsilon3 == pytest.approx(1 / 3)
    # stored parameters round-trip; an svt2 account's stored text carries none of the new keys
    assert AccountParams.from_storage(noisy.to_storage()) == noisy
    assert "margin" not in account_params(dataset_policy()).to_storage()


@pytest.mark.parametrize(
    ("table", "what"),
    [
        ("mechanism = 'svt2'\nmargin_above = 1.0", "margin_above applies to mechanism 'svt2-margin'"),
        ("mechanism = 'svt2'\nmargin_below = 1.0", "margin_below applies"),
        ("mechanism = 'svt2-margin'\nrelease_share = 0.3", "release_share applies to mechanism 'svt2-noisy'"),
        (
            "mechanism = 'svt2-noisy'\ncount_epsilon = 0.1",
            "count_epsilon must be 0 with mechanism 'svt2-noisy'",
        ),
        ("mechanism = 'svt2-noisy'\nrelease_share = 1.0", "release_share"),
        ("mechanism = 'svt2-margin'\nmargin_above = -1.0", "margin_above"),
        ("mechanism = 'svt2-mar'", "mechanism"),
    ],
)
def test_sanitiser_mistakes_name_the_key(tmp_path: Path, table: str, what: str) -> None:
    path = write(tmp_path, f"[datasets.x]\n{table}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={})
    assert what in str(raised.value) and "datasets.x" in str(raised.value)
