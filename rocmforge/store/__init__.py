"""The store: its on-disk layout, entries, index, roots, gc, usage, queries and verification."""
