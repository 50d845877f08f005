"""Counts for people to read: parameters, FLOPs and MACs with a K/M/G suffix.

One formatter for the command line (``nas cost``), the run report and the search logs,
so that a count reads the same everywhere. Imports nothing: the CLI loads it at start.
"""

from __future__ import annotations


def human(n: float, small: str = ".0f") -> str:
    """``n`` scaled to K, M or G with two decimals (``1.23M``); below 1,000 written with
    the format spec ``small`` (``".0f"``: whole counts; ``".4g"`` for milliseconds)."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:{small}}"


__all__ = ["human"]
