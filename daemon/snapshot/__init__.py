"""Snapshots: the initial one (initial.py), the incremental one (incremental.py), read views (views.py),
the text-protocol fast path (wire.py) and table descriptions and chunks (tables.py)."""
