"""Shared binary caches: push store entries to a cache and substitute them on a miss."""
