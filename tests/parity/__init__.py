"""Parity checks against golden vectors in the ``shared/parity`` format.

Each component module here exposes ``CASES``: a dict mapping a case name to a function
``check(ctx: ParityContext) -> None`` that raises AssertionError on a mismatch. ``tests/test_parity.py``
runs every case for every model version the manifest lists.
"""
