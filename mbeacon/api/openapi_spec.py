"""The OpenAPI 3.1 document of the service (placeholder being completed)."""

from __future__ import annotations


def openapi_document(server_url: str) -> dict:
    return {"openapi": "3.1.0", "info": {"title": "MBeacon", "version": "0.1.0"},
            "servers": [{"url": server_url}], "paths": {}}  # fmt: skip
