"""A slot's size: the max of its members' sizes, the provably covered ones left out before sympy compares."""

import sympy

from kiln.dialects.dims import FloorDiv, dim
from kiln.runtime.memplan import _dominates, _max, expr_text

B, L = dim("B").expr, dim("L").expr


def test_dominates_only_what_holds_for_every_value():
    assert _dominates(8 * B * L, 4 * B * L)
    assert _dominates(4 * B * L + 64, 4 * B * L)
    assert _dominates(B * L * L + B * L, B * L)
    assert _dominates(4 * B, 4 * B)  # equal sizes: one is kept
    assert not _dominates(4 * B * L, 8 * B * L)
    assert not _dominates(1024 * B, B * L)  # L may exceed 1024
    assert not _dominates(B * L, 1024 * B)
    assert not _dominates(B * L - B, 0)  # a negative coefficient: not proven (though true for L >= 1)
    # A floor division is not a plain monomial: not proven, left to sympy.
    assert not _dominates(64 * FloorDiv(B + 63, sympy.Integer(64)), B)


def test_max_keeps_what_may_be_largest():
    assert _max([4 * B * L, 8 * B * L, 8 * B * L]) == 8 * B * L
    assert _max([256 * B]) == 256 * B
    assert expr_text(_max([1024 * B, 4 * B * L, 512 * B])) == expr_text(sympy.Max(1024 * B, 4 * B * L))
    # The order members arrive in does not change the result.
    sizes = [4 * B * L, 1024 * B, 8 * B * L, 64, 512 * B]
    assert _max(sizes) == _max(list(reversed(sizes))) == sympy.Max(*sizes)
