"""What a Redis call can raise when the store, not the caller, is at fault.

redis-py's cluster client raises some of its errors (a slot no node serves, a cluster
still forming) outside ``RedisError``; they mean "Redis unavailable" all the same.
"""

from __future__ import annotations

from redis.exceptions import RedisClusterException, RedisError

REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException)
