"""Utilities with no knowledge of rocmforge: atomic files, hashing, stat caches, progress."""
