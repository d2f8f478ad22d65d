"""Service configuration: defaults, then a TOML file, then ``MBEACON_*`` environment variables.

Validated with pydantic (the field's standard for typed settings), so a bad file is refused at
start-up with the location of every mistake (``datasets.demo.epsilon: Input should be greater than
0``) instead of failing on the first request. Dataset policies are documented in ``docs/service.md``.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from mbeacon.beacon.oidc_config import OIDCConfig
from mbeacon.beacon.sanitisers.policy import MIN_SVT_EPSILON, TIERS, PolicyBase, Tier
from mbeacon.beacon.sanitisers.registry import SANITISERS, check_keys, mechanism_of

__all__ = [
    "MIN_SVT_EPSILON",
    "TIERS",
    "ConfigError",
    "DatasetPolicy",
    "ServiceConfig",
    "Tier",
    "dataset_policy",
    "load_config",
]

ENV_PREFIX = "MBEACON_"
#: A web origin as a browser sends it in ``Origin``: scheme, host, optional port, nothing more.
ORIGIN_PATTERN = r"https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the source and the field."""


#: How one dataset is protected and who may query it: the policy model of the sanitiser its
#: ``mechanism`` names (each mechanism's keys validated by its own model; see
#: :mod:`mbeacon.beacon.sanitisers`). A table that names no mechanism gets the default one.
if TYPE_CHECKING:
    DatasetPolicy = PolicyBase
else:
    DatasetPolicy = Annotated[
        Union[tuple(Annotated[s.policy_model, Tag(name)] for name, s in SANITISERS.items())],  # noqa: UP007
        Discriminator(
            mechanism_of,
            custom_error_type="mechanism",
            custom_error_message="mechanism must be one of " + ", ".join(map(repr, SANITISERS)),
        ),
        BeforeValidator(check_keys),
    ]
_POLICY: TypeAdapter[PolicyBase] = TypeAdapter(DatasetPolicy)


def dataset_policy(**keys: Any) -> PolicyBase:
    """A dataset policy from its keys, validated as the configuration file's tables are."""
    return _POLICY.validate_python(keys)


class ServiceConfig(BaseModel):
    """Everything the service reads at start-up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    beacon_id: str = "org.mbeacon.local"
    beacon_name: str = "MBeacon"
    organization_id: str = "org.mbeacon"
    organization_name: str = "MBeacon operator"
    organization_url: str = "https://example.org"
    environment: Literal["prod", "test", "dev", "staging"] = "dev"
    store: Path = Path("data/store")
    database_url: str = "sqlite:///data/ledger.sqlite3"
    sqlite_sync: Literal["state", "full"] = "state"
    redis_url: str | None = None
    anonymous: Literal["refuse", "shared"] = "refuse"
    rate_limit_per_minute: int = Field(600, ge=0)
    max_body_bytes: int = Field(1_000_000, ge=1024)
    max_batch: int = Field(1000, ge=1, le=100_000)
    trusted_proxies: int = Field(0, ge=0, le=10)
    metrics_public: bool = False
    cors_origins: list[str] = Field(default_factory=list, max_length=100)
    default_prior: str | None = None
    #: Who the audit log names for changes made with the ``mbeacon`` command on this beacon's ledger
    #: (``cli:OPERATOR``); unset: the OS user running the command.
    operator: str | None = Field(None, min_length=1, max_length=100)
    #: Bearer tokens of OpenID Connect providers beside API keys (None: API keys only).
    oidc: OIDCConfig | None = None
    defaults: DatasetPolicy = Field(default_factory=lambda: dataset_policy())
    datasets: dict[str, DatasetPolicy] = Field(default_factory=dict)

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        # compared with the browser's Origin header as text, so each must be written as browsers send it
        for origin in origins:
            if origin != "*" and not re.fullmatch(ORIGIN_PATTERN, origin):
                raise ValueError(
                    f"{origin!r} is not an origin: write scheme://host[:port] (no path, no trailing /), "
                    "or * for any"
                )
        if "*" in origins and len(origins) > 1:
            raise ValueError("* allows every origin: list it alone")
        return [origin.lower() for origin in origins]  # browsers send scheme and host in lower case

    def policy(self, dataset_id: str) -> PolicyBase:
        """The policy of a dataset: its own table in the file, else ``defaults``."""
        return self.datasets.get(dataset_id, self.defaults)

    def prior_for(self, dataset_id: str) -> str | None:
        """The prior this configuration names for a dataset: its policy's ``prior``, else ``default_prior``
        (None: the store's only prior, see :func:`mbeacon.store.priors.choose_prior`)."""
        return self.policy(dataset_id).prior or self.default_prior


def _policy_tables(raw: dict[str, Any]) -> dict[str, Any]:
    """Dataset tables inherit every key they do not set from ``[defaults]``."""
    defaults = raw.get("defaults", {})
    datasets = raw.get("datasets", {})
    if not isinstance(defaults, dict) or not isinstance(datasets, dict):
        return raw
    merged = {
        name: {**defaults, **table} if isinstance(table, dict) else table for name, table in datasets.items()
    }
    return {**raw, "datasets": merged}


def _from_environment(env: Mapping[str, str]) -> dict[str, Any]:
    """Top-level scalar settings from ``MBEACON_<FIELD>`` (dataset policies live in the file)."""
    out: dict[str, Any] = {}
    for name, field in ServiceConfig.model_fields.items():
        if name in ("defaults", "datasets", "oidc"):  # tables: in the file only
            continue
        value = env.get(ENV_PREFIX + name.upper())
        if value is None:
            continue
        if field.annotation is bool:
            flag = value.strip().lower()
            if flag not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ConfigError(f"{ENV_PREFIX}{name.upper()}={value!r}: write true or false")
            out[name] = flag in ("1", "true", "yes", "on")
        elif name == "cors_origins":  # a list: comma-separated in the environment
            out[name] = [item.strip() for item in value.split(",") if item.strip()]
        else:
            out[name] = value
    return out


def _describe(error: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid configuration"]
    for item in error.errors():
        where = ".".join(str(part) for part in _without_tag(item["loc"])) or "(top level)"
        lines.append(f"  {where}: {item['msg']}")
    return "\n".join(lines)


def _without_tag(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """An error's location without the mechanism tag the policy union adds (``datasets.demo.epsilon``,
    not ``datasets.demo.svt2.epsilon``): the file has no such level."""
    tag_at = 1 if loc[:1] == ("defaults",) else 2 if loc[:1] == ("datasets",) else None
    if tag_at is not None and len(loc) > tag_at and loc[tag_at] in SANITISERS:
        return loc[:tag_at] + loc[tag_at + 1 :]
    return loc


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ServiceConfig:
    """Layer defaults, the TOML file (``path`` or ``$MBEACON_CONFIG``), the environment, overrides."""
    env = os.environ if env is None else env
    path = path or env.get(ENV_PREFIX + "CONFIG")
    raw: dict[str, Any] = {}
    source = "defaults"
    if path:
        source = str(path)
        try:
            with open(path, "rb") as handle:
                raw = tomllib.load(handle)
        except FileNotFoundError:
            raise ConfigError(f"{path}: configuration file not found") from None
        except IsADirectoryError:
            raise ConfigError(f"{path}: is a folder, not a configuration file") from None
        except OSError as error:
            raise ConfigError(
                f"{path}: cannot read the configuration file: {error.strerror or error}"
            ) from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: not valid TOML: {error}") from None
        except UnicodeDecodeError as error:
            raise ConfigError(
                f"{path}: not valid TOML: not UTF-8 text ({error.reason} at byte {error.start})"
            ) from None
        except RecursionError:
            raise ConfigError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
    layered = _policy_tables({**raw, **_from_environment(env), **dict(overrides or {})})
    try:
        return ServiceConfig.model_validate(layered)
    except ValidationError as error:
        raise ConfigError(_describe(error, source + " (+ MBEACON_* environment)")) from None
