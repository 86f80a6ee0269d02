"""Helpers the tests share: servers, the fake primary, the fault proxy, daemon runners, corpus manifest.

Test modules import from here and never from each other.
"""
