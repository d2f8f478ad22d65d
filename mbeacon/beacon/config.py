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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Tier = Literal["PUBLIC", "REGISTERED", "CONTROLLED"]
TIERS: tuple[Tier, ...] = ("PUBLIC", "REGISTERED", "CONTROLLED")
ENV_PREFIX = "MBEACON_"
#: The least epsilon SVT² may get (``epsilon - count_epsilon``): below it the noise scales overflow the
#: integer noise sampler (an epsilon of 1e-300 gave garbage thresholds), and answers would be noise.
MIN_SVT_EPSILON = 1e-6
#: A web origin as a browser sends it in ``Origin``: scheme, host, optional port, nothing more.
ORIGIN_PATTERN = r"https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?"


#: The mechanisms whose TOPs release a noisy count paid by ``release_share`` (epsilon3).
RELEASING = ("svt2-noisy", "online-pmw")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the source and the field."""


class DatasetPolicy(BaseModel):
    """How one dataset is protected and who may query it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mechanism: Literal["svt2", "svt2-margin", "svt2-noisy", "online-pmw", "none"] = "svt2"
    allow_unprotected: bool = False
    epsilon: float = Field(1.0, gt=0, le=100, allow_inf_nan=False)
    c: int = Field(5, ge=1, le=100_000)
    threshold: int = Field(1, ge=1)
    variant: Literal["single", "redraw"] = "single"
    scope: Literal["user", "group", "global"] = "user"
    on_exhausted: Literal["refuse", "prior"] = "refuse"
    tier: Tier = "REGISTERED"
    prior: str | None = None
    count_epsilon: float = Field(0.0, ge=0, allow_inf_nan=False)
    #: The most samples of one patient counted (the sensitivity); None: the bound recorded at ingest
    #: (see mbeacon.beacon.contribution).
    contribution_bound: int | None = Field(None, ge=1, le=10_000)
    #: svt2-margin / svt2-noisy: how far above / below T the thresholds of SVT²'s two tests sit (patients).
    margin_above: float = Field(0.0, ge=0, le=1_000_000, allow_inf_nan=False)
    margin_below: float = Field(0.0, ge=0, le=1_000_000, allow_inf_nan=False)
    #: svt2-noisy / online-pmw: the share of epsilon spent on the noisy counts that answer TOPs (epsilon3).
    release_share: float | None = Field(None, gt=0, lt=1, allow_inf_nan=False)
    #: online-pmw: how clearly (patients) the data must disagree with the synthetic answer for a TOP.
    margin: float = Field(0.0, ge=0, le=1_000_000, allow_inf_nan=False)

    @model_validator(mode="after")
    def _consistent(self) -> DatasetPolicy:
        if self.mechanism == "none" and not self.allow_unprotected:
            raise ValueError(
                "mechanism 'none' answers from the raw data with no protection; it needs "
                "allow_unprotected = true (for evaluations only)"
            )
        _check_sanitiser_keys(self)
        if self.count_epsilon >= self.epsilon:
            raise ValueError("count_epsilon is carved out of epsilon and must be smaller than it")
        if self.epsilon - self.count_epsilon < MIN_SVT_EPSILON:
            raise ValueError(
                f"epsilon - count_epsilon (the SVT² part) must be at least {MIN_SVT_EPSILON:g}, "
                f"not {self.epsilon - self.count_epsilon:g}"
            )
        if self.epsilon * (1 - self.effective_release_share) < MIN_SVT_EPSILON:
            raise ValueError(
                f"epsilon * (1 - release_share) (the SVT² part) must be at least {MIN_SVT_EPSILON:g}"
            )
        return self

    @property
    def effective_release_share(self) -> float:
        """epsilon3 / epsilon: ``release_share`` (default 1/3) with svt2-noisy and online-pmw, else 0."""
        if self.mechanism not in RELEASING:
            return 0.0
        return 1 / 3 if self.release_share is None else self.release_share


def _check_sanitiser_keys(policy: DatasetPolicy) -> None:
    """Each sanitiser's keys only with its mechanism: a margin or share the mechanism would ignore is
    a mistake in the file, not a setting (the operator believes the answers use it)."""
    margins = policy.margin_above or policy.margin_below
    if margins and policy.mechanism not in ("svt2-margin", "svt2-noisy"):
        key = "margin_above" if policy.margin_above else "margin_below"
        raise ValueError(
            f"{key} applies to mechanism 'svt2-margin' or 'svt2-noisy', not {policy.mechanism!r}"
            + (" (online-pmw has one margin: set margin)" if policy.mechanism == "online-pmw" else "")
        )
    if policy.margin and policy.mechanism != "online-pmw":
        raise ValueError(
            f"margin applies to mechanism 'online-pmw', not {policy.mechanism!r}"
            + (" (use margin_above and margin_below)" if policy.mechanism in ("svt2-margin", "svt2-noisy")
               else "")
        )  # fmt: skip
    if policy.release_share is not None and policy.mechanism not in RELEASING:
        raise ValueError(
            f"release_share applies to mechanism 'svt2-noisy' or 'online-pmw', not {policy.mechanism!r}"
        )
    if policy.mechanism in RELEASING and policy.count_epsilon > 0:
        raise ValueError(
            f"count_epsilon must be 0 with mechanism {policy.mechanism!r}: its TOP answers release their "
            "own noisy count, paid by release_share"
        )
    if policy.mechanism == "online-pmw" and policy.variant != "single":
        raise ValueError(
            "variant 'redraw' applies to the SVT² mechanisms; online-pmw draws one noisy threshold "
            "for the account's whole stream"
        )


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
    defaults: DatasetPolicy = DatasetPolicy()
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

    def policy(self, dataset_id: str) -> DatasetPolicy:
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
        if name in ("defaults", "datasets"):
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
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"  {where}: {item['msg']}")
    return "\n".join(lines)


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
