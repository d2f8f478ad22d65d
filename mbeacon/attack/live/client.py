"""The HTTP client: a researcher's JSON GETs and batch POSTs to one beacon, with retries.

429 with ``Retry-After`` (rate limit) is waited out and retried; 429 for an exhausted budget raises
:class:`~mbeacon.attack.live.errors.BeaconBudgetRefused`. 5xx and connection errors are retried a few
times. The key is sent only in the ``Authorization`` header and never appears in a message.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from mbeacon import __version__
from mbeacon.attack.live.errors import BatchTooLarge, BeaconBudgetRefused, LiveAttackError

#: Longest single wait for a rate limit; a longer ``Retry-After`` is waited in steps.
MAX_WAIT_S = 120.0


def api_base(url: str) -> str:
    """The ``/api`` root from what the user typed: ``http://host:5050``, ``.../api`` or ``.../api/``."""
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://[^/]+", url):
        raise LiveAttackError(f"--url must start with http:// or https://, got {url[:80]!r}")
    return url if url.endswith("/api") else url + "/api"


def _error_body(response: httpx.Response) -> dict:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def error_message(body: dict, fallback: str = "") -> str:
    """The Beacon error body's ``error.errorMessage`` (safe to show: the server never echoes keys)."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("errorMessage") if isinstance(error, dict) else None
    return str(message)[:300] if message else fallback


def is_budget_exhausted(retry_after: str | None, body: dict) -> bool:
    """Tell a 429 for an exhausted budget from a rate limit.

    The beacon's budget refusal carries the budget in ``info`` (``dataset``, ``positivesUsed``...)
    and no ``Retry-After``; the rate limit carries ``Retry-After`` and no ``info``. A 429 with neither
    is read by its message.
    """
    info = body.get("info")
    if isinstance(info, dict) and ("positivesUsed" in info or "dataset" in info):
        return True
    if retry_after is not None:
        return False
    return "budget" in error_message(body).lower()


def retry_after_seconds(value: str | None, default: float = 5.0, now: float | None = None) -> float:
    """``Retry-After`` (seconds or an HTTP date) in seconds, at least 0.1; ``default`` if unreadable."""
    if value is None:
        return default
    text = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return max(0.1, float(text))
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return default
    return max(0.1, when - (time.time() if now is None else now))


@dataclass
class BeaconClient:
    """A researcher's client of one beacon: JSON GETs and batch POSTs, with retries.

    ``transport`` and ``sleep`` are for tests (``httpx.MockTransport``, a fake clock); ``on_wait`` is
    told why and how long the client waits (a progress bar shows it).
    """

    url: str
    key: str = field(repr=False)
    timeout: float = 60.0
    retries: int = 3
    rate_limit_waits: int = 100
    transport: httpx.BaseTransport | None = None
    sleep: Callable[[float], None] = time.sleep
    on_wait: Callable[[float, str], None] | None = None
    requests: int = 0
    base: str = field(init=False)
    _http: httpx.Client | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.base = api_base(self.url)
        if not self.key or not self.key.strip():
            raise LiveAttackError("no API key: give --key (or set MBEACON_KEY)")
        self._http = httpx.Client(
            base_url=self.base,
            headers={
                "Authorization": f"Bearer {self.key.strip()}",
                "User-Agent": f"mbeacon-attack-live/{__version__}",
                "Accept": "application/json",
            },
            timeout=self.timeout,
            transport=self.transport,
        )

    def __repr__(self) -> str:  # never the key
        return f"BeaconClient({self.base!r})"

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def __enter__(self) -> BeaconClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _clean(self, text: str) -> str:
        """Belt and braces: no message leaves this client with the key in it."""
        key = self.key.strip()
        return text.replace(key, "<key>") if key else text

    def _pause(self, seconds: float, reason: str) -> None:
        if self.on_wait is not None:
            self.on_wait(seconds, reason)
        while seconds > 0:
            step = min(seconds, MAX_WAIT_S)
            self.sleep(step)
            seconds -= step

    def _send(self, method: str, path: str, body: Any = None) -> httpx.Response:
        """One request; rate limits waited out, 5xx and connection errors retried ``retries`` times."""
        failures = waits = 0
        where = f"{method} {self.base}{path}"
        while True:
            try:
                self.requests += 1
                response = self._http.request(method, path, json=body)  # type: ignore[union-attr]
            except httpx.TransportError as error:
                failures += 1
                if failures > self.retries:
                    detail = self._clean(f"{type(error).__name__}: {error}")
                    raise LiveAttackError(f"{where}: no answer after {failures} tries ({detail})") from None
                self._pause(min(30.0, 2.0 ** (failures - 1)), f"connection error, retry {failures}")
                continue
            status = response.status_code
            if status == 429:
                retry_after = response.headers.get("Retry-After")
                payload = _error_body(response)
                if is_budget_exhausted(retry_after, payload):
                    raise BeaconBudgetRefused(self._clean(error_message(payload, "privacy budget exhausted")))
                waits += 1
                if waits > self.rate_limit_waits:
                    raise LiveAttackError(f"{where}: still rate limited after {waits - 1} waits")
                self._pause(retry_after_seconds(retry_after), "rate limited")
                continue
            if status >= 500:
                failures += 1
                if failures > self.retries:
                    message = self._clean(error_message(_error_body(response), response.reason_phrase))
                    raise LiveAttackError(f"{where}: HTTP {status} ({message}) after {failures} tries")
                default = min(30.0, 2.0 ** (failures - 1))
                wait = retry_after_seconds(response.headers.get("Retry-After"), default)
                self._pause(min(wait, MAX_WAIT_S), f"HTTP {status}, retry {failures}")
                continue
            return response

    def _json(self, response: httpx.Response, where: str) -> Any:
        if response.status_code >= 400:
            message = self._clean(error_message(_error_body(response), response.reason_phrase))
            hint = {401: " (check --key)", 403: " (a researcher key and a dataset it may see?)"}
            raise LiveAttackError(
                f"{where}: HTTP {response.status_code}: {message}{hint.get(response.status_code, '')}"
            )
        try:
            return response.json()
        except ValueError:
            raise LiveAttackError(f"{where}: the answer is not JSON (is --url a beacon?)") from None

    def get(self, path: str) -> Any:
        """A JSON GET under ``/api``; 4xx raise :class:`LiveAttackError` with the server's message."""
        return self._json(self._send("GET", path), f"GET {self.base}{path}")

    def get_optional(self, path: str) -> Any:
        """A JSON GET of a document the server may lack: None on any 4xx or a body that is not JSON."""
        response = self._send("GET", path)
        if response.status_code >= 400:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def ask(self, queries: list[dict], granularity: str = "boolean") -> Any:
        """POST one batch to ``/api/methylation``; :class:`BatchTooLarge` or :class:`BeaconBudgetRefused`."""
        body = {
            "meta": {"apiVersion": "v2.0.0"},
            "query": {
                "requestParameters": queries,
                "requestedGranularity": granularity,
                "includeResultsetResponses": "ALL",
            },
        }
        response = self._send("POST", "/methylation", body)
        if response.status_code == 413:
            raise BatchTooLarge(f"a batch of {len(queries)} queries is too large for the server")
        if response.status_code == 400:
            message = error_message(_error_body(response))
            limit = re.search(r"at most (\d+) per request", message)
            if limit:
                raise BatchTooLarge(message, int(limit.group(1)))
        return self._json(response, f"POST {self.base}/methylation")
