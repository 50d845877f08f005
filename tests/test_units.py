"""``nas.units.human``: the one formatter of counts (CLI, run report, search logs)."""

from __future__ import annotations

import pytest

from nas.units import human


@pytest.mark.parametrize("n, small, expected", [
    (22_500_000_000, ".0f", "22.50G"),
    (4_020_000, ".0f", "4.02M"),
    (-1_500, ".0f", "-1.50K"),
    (999, ".0f", "999"),
    (12.3456, ".4g", "12.35"),
    (0.5, ".0f", "0"),
])
def test_counts_are_scaled_to_one_suffix(n, small, expected):
    assert human(n, small) == expected
