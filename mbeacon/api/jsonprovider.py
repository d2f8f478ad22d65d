"""The app's JSON provider: responses encoded by orjson, request bodies decoded by the standard library.

Encoding a batch's response with ``json.dumps`` was the largest single cost of a 1,000-query POST
outside the engine; orjson writes the same JSON several times faster. What it writes, against
Flask's default provider (``json.dumps`` with ``ensure_ascii`` and ``separators=(",", ":")``):

- the same values in the same key order (``sort_keys`` is honoured; the app sets it to False);
- non-ASCII text as UTF-8 rather than ``\\uXXXX`` escapes (JSON's own encoding, RFC 8259);
- floats in their shortest round-trip form (``1e16`` where ``json`` writes ``1e+16``: the same number);
- NaN and infinities as ``null`` (``json.dumps`` writes the non-JSON tokens ``NaN`` and
  ``Infinity``). No response carries one: query bounds are refused unless finite, and the budget
  parameters come from a configuration validated finite.

Whatever orjson refuses (keys that are not strings, integers beyond 64 bits, lone surrogates, nesting
deeper than orjson's limit, a keyword argument this provider does not translate) is encoded by
Flask's default provider instead, so it gives exactly what it gave before, a ``TypeError`` included:
an object neither can encode still ends as the Beacon error body (500) of the app's error handler.
Dates, dataclasses and objects with ``__html__`` go through Flask's ``default`` as before (orjson's
own formats for them are switched off), and float subclasses (numpy's ``float64``) are written as
floats, as ``json`` writes them.

Decoding stays with ``json.loads`` (inherited): orjson's decoder refuses ``NaN``, ``Infinity`` and
``1e999`` (which ``json`` reads as floats the query model then refuses by field), stops at 1,024
levels of nesting with a syntax error (the API answers "nested too deeply"), reads integers above
64 bits as floats and accepts only UTF-8; every one of those would change an answer of the API.
"""

from __future__ import annotations

from typing import Any

import orjson
from flask.json.provider import DefaultJSONProvider
from flask.wrappers import Response

_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


class OrjsonProvider(DefaultJSONProvider):
    """``dumps`` and ``response`` through orjson (falling back to ``json``), ``loads`` through ``json``."""

    sort_keys = False

    def _encode(self, obj: Any, option: int) -> bytes:
        """``obj`` as UTF-8 JSON bytes; a TypeError if orjson cannot (the caller falls back)."""
        flask_default = self.default

        def default(value: Any) -> Any:
            if isinstance(value, float):  # a float subclass (numpy.float64): json writes it as a float
                return float(value)
            return flask_default(value)

        if self.sort_keys:
            option |= orjson.OPT_SORT_KEYS
        return orjson.dumps(obj, default=default, option=option | _OPTIONS)

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        """Compact JSON text of ``obj`` (``json.dumps`` would put spaces after ``,`` and ``:``); with
        keyword arguments (``indent``, ``separators``...) exactly ``json.dumps``'s."""
        if not kwargs:
            try:
                return self._encode(obj, 0).decode()
            except TypeError:
                pass
        return super().dumps(obj, **kwargs)

    def response(self, *args: Any, **kwargs: Any) -> Response:
        """As Flask's: compact JSON and a final newline, indented by two in debug mode (or compact=False)."""
        obj = self._prepare_response_obj(args, kwargs)
        indent = (self.compact is None and self._app.debug) or self.compact is False
        try:
            body = self._encode(obj, orjson.OPT_APPEND_NEWLINE | (orjson.OPT_INDENT_2 if indent else 0))
        except TypeError:
            return super().response(*args, **kwargs)
        return self._app.response_class(body, mimetype=self.mimetype)
