"""Validate responses against the official GA4GH Beacon v2 framework JSON schemas.

The schemas (draft 2020-12) are vendored in ``tests/beacon_v2/framework/json`` (CC0, with their
licence and source commit in ``tests/beacon_v2``), so a clone tests itself. They reference each other with
relative ``$ref``s and have no ``$id``, so every file is registered under its ``file://`` URI and a
reference resolves against the URI of the file it appears in, exactly as on disk.

    from beacon_schemas import validate
    validate(body, "responses/beaconResultsetsResponse.json")

A missing folder is an error (:class:`SchemasMissing`), never a silent skip: a beacon whose
responses were never checked must not look compliant.

:func:`conforms` checks a response against the service's own schema-only model of it (those the OpenAPI
document is generated from), so that the fast dict builders and the document cannot drift apart.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from pydantic import BaseModel, ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

FRAMEWORK = Path(__file__).resolve().parent / "beacon_v2" / "framework" / "json"


class SchemasMissing(RuntimeError):
    """The beacon-v2 framework schemas are not where the tests expect them."""


class SchemaViolation(AssertionError):
    """An instance does not validate; the message lists every violation with its JSON path."""


def framework_root() -> Path:
    """The ``framework/json`` folder, or :class:`SchemasMissing` saying how to provide it."""
    if not (FRAMEWORK / "responses").is_dir():
        raise SchemasMissing(
            f"the GA4GH Beacon v2 framework schemas are missing: expected {FRAMEWORK} "
            "(they are part of the repository: restore tests/beacon_v2 from git)"
        )
    return FRAMEWORK


@cache
def registry() -> Registry:
    """Every ``*.json`` under the framework folder, keyed by its ``file://`` URI."""
    root = framework_root()
    resources = []
    for path in sorted(root.rglob("*.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resources.append((path.as_uri(), Resource.from_contents(contents, default_specification=DRAFT202012)))
    return Registry().with_resources(resources).crawl()


def schema_uri(name: str) -> str:
    """The registry key of ``name`` (a path relative to ``framework/json``)."""
    path = framework_root() / name
    if not path.is_file():
        raise SchemasMissing(f"no schema {name!r} under {framework_root()}")
    return path.as_uri()


@cache
def validator(name: str) -> Draft202012Validator:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": schema_uri(name)}
    return Draft202012Validator(
        schema, registry=registry(), format_checker=Draft202012Validator.FORMAT_CHECKER
    )


def _where(path: Any) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def errors(instance: Any, name: str) -> list[str]:
    """Every violation of ``name`` by ``instance`` as ``$.json.path: message`` lines."""
    found = sorted(validator(name).iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_where(e.absolute_path)}: {e.message}" for e in found]


def validate(instance: Any, name: str) -> None:
    """Raise :class:`SchemaViolation` (readable: paths and messages) unless ``instance`` is valid."""
    found = list(validator(name).iter_errors(instance))
    if not found:
        return
    best = best_match(found)
    lines = [
        f"response does not validate against {name} ({len(found)} error(s)):",
        f"  most relevant: {_where(best.absolute_path)}: {best.message}",
        *(f"  {line}" for line in errors(instance, name)[:20]),
        "  instance: " + json.dumps(instance, default=str)[:2000],
    ]
    raise SchemaViolation("\n".join(lines))


def conforms(instance: Any, model: type[BaseModel]) -> None:
    """Raise :class:`SchemaViolation` unless ``instance`` is what the schema-only ``model`` describes: it
    validates as JSON, strictly (no coercion of a string into a number), and the model keeps all of it
    (no key the model does not know, no value it reads differently)."""
    text = json.dumps(instance)
    try:
        parsed = model.model_validate_json(text, strict=True)
    except ValidationError as error:
        raise SchemaViolation(
            f"response does not conform to {model.__name__}: {error}\n  instance: {text[:2000]}"
        ) from None
    kept = parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if kept != json.loads(text):
        raise SchemaViolation(
            f"{model.__name__} reads the response differently:\n  sent: {text[:1500]}\n  kept: "
            + json.dumps(kept)[:1500]
        )
