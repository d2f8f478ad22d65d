"""Per-key request rate limit: a fixed one-minute window, in process memory or in Redis.

Memory (the default) counts per worker process, so with W workers a key can make up to W times the
limit; configure ``redis_url`` to share one count across workers and hosts. The limit protects the
service, not privacy (the SVT² budget does that), so if Redis is unreachable requests are let
through and a warning is logged rather than the beacon going down with it.

The Redis client is made once per process, under a lock: gthread workers serve requests from
several threads, and a client made twice would be dropped once, and redis-py closes the connection
pool of a dropped client, under the feet of the thread still using it (seen under load: requests let
through uncounted, and a 500 from a closed socket).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time

from mbeacon.process import PROCESS

log = logging.getLogger("mbeacon.ratelimit")
WINDOW_S = 60


class RateLimiter:
    def __init__(self, per_minute: int, redis_url: str | None = None) -> None:
        if redis_url and importlib.util.find_spec("redis") is None:
            raise ValueError("redis_url needs the 'redis' extra: pip install 'mbeacon[redis]'")
        self.per_minute = per_minute
        self.redis_url = redis_url
        self._counts: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._client_lock = threading.Lock()
        self._redis = None
        self._redis_pid: int | None = None

    @property
    def backend(self) -> str:
        return "redis" if self.redis_url else "memory"

    def hit(self, identity: str) -> tuple[bool, int]:
        """Count one request; ``(allowed, seconds until the window resets)``."""
        if self.per_minute <= 0:
            return True, 0
        now = time.time()
        window = int(now // WINDOW_S)
        retry_after = max(1, int((window + 1) * WINDOW_S - now))
        count = self._redis_hit(identity, window) if self.redis_url else self._memory_hit(identity, window)
        if count is None:
            return True, 0
        return count <= self.per_minute, retry_after

    def _memory_hit(self, identity: str, window: int) -> int:
        with self._lock:
            start, count = self._counts.get(identity, (window, 0))
            count = count + 1 if start == window else 1
            self._counts[identity] = (window, count)
            if len(self._counts) > 100_000:  # forget identities of past windows
                self._counts = {k: v for k, v in self._counts.items() if v[0] == window}
            return count

    def _client(self):
        """This process's Redis client (one per pid: a forked child never uses its parent's sockets)."""
        client = self._redis
        if client is not None and self._redis_pid == PROCESS.pid:
            return client
        with self._client_lock:
            if self._redis is None or self._redis_pid != PROCESS.pid:
                import redis

                self._redis = redis.Redis.from_url(
                    self.redis_url, socket_timeout=0.5, socket_connect_timeout=0.5
                )
                self._redis_pid = PROCESS.pid
            return self._redis

    def _redis_hit(self, identity: str, window: int) -> int | None:
        import redis

        key = f"mbeacon:ratelimit:{identity}:{window}"
        try:
            pipe = self._client().pipeline()
            pipe.incr(key)
            pipe.expire(key, 2 * WINDOW_S)
            count, _ = pipe.execute()
            return int(count)
        except (redis.RedisError, OSError, ValueError) as error:  # ValueError: a socket closed mid-read
            log.warning(
                "rate limit backend unreachable, request allowed",
                extra={"error": f"{type(error).__name__}: {error}", "identity": identity},
            )
            return None
