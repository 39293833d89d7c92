"""Optimization profiles: selection at the boundaries, each policy, the budget."""

import pytest

from kiln.errors import KilnError, ShapeError
from kiln.module import SymbolInfo
from kiln.runtime.profiles import ProfileSelector, bucket_of, normalize_profiles

SYMS = {"B": SymbolInfo("B", 1, 64, 8), "L": SymbolInfo("L", 1, 512, 128)}
PROFILES = [{"B": (1, 4, 8)}, {"B": (9, 32, 64), "L": (1, 128, 512)}]


def selector(policy="error", budget=4, profiles=PROFILES):
    built = []

    def build(p):
        built.append(p.name if p is not None else "generic")
        return ("variant", p.name if p is not None else "generic", p.opt_binding(SYMS) if p else None)

    return ProfileSelector(normalize_profiles(profiles, SYMS), SYMS, build, policy, budget), built


@pytest.mark.parametrize(
    "b, profile",
    [(1, "profile0"), (4, "profile0"), (8, "profile0"), (9, "profile1"), (33, "profile1"), (64, "profile1")],
)
def test_selection_at_boundaries(b, profile):
    sel, _ = selector()
    s = sel.select({"B": b, "L": 100})
    assert s.kind == "profile" and s.profile.name == profile and s.variant[1] == profile


def test_opt_point_of_each_profile():
    sel, built = selector()
    assert built == ["profile0", "profile1"]  # one build per profile, no generic under "error"
    assert sel.variants["profile0"][2] == {"B": 4, "L": 128}
    assert sel.variants["profile1"][2] == {"B": 32, "L": 128}


def test_policy_error_names_nearest():
    profiles = [{"name": "small", "B": (1, 4, 8)}, {"name": "large", "B": (9, 32, 64), "L": (1, 128, 256)}]
    sel, _ = selector(profiles=profiles)
    with pytest.raises(ShapeError) as e:
        sel.select({"B": 40, "L": 300})
    assert str(e.value) == (
        "shape B = 40, L = 300 is outside every profile (nearest: large B in [9, 64], L in [1, 256]); "
        "compile with policy='specialize' or 'generic' to run it"
    )


def test_policy_generic():
    profiles = [{"B": (1, 4, 8)}]
    sel, built = selector("generic", profiles=profiles)
    assert built == ["profile0", "generic"]
    s = sel.select({"B": 9, "L": 1})
    assert s.kind == "generic" and s.variant[1] == "generic"
    assert sel.describe()["generic_calls"] == 1


def test_no_profiles_is_generic():
    sel, built = selector(profiles=None)
    assert sel.select({"B": 64, "L": 512}).kind == "generic"
    assert built == ["generic"]


def test_policy_specialize_caches_per_bucket():
    sel, built = selector("specialize", profiles=[{"B": (1, 4, 8)}])
    s1 = sel.select({"B": 20, "L": 100})
    assert s1.kind == "specialization" and not s1.cache_hit
    assert s1.profile.range_map == {"B": (17, 20, 32), "L": (65, 100, 128)}
    s2 = sel.select({"B": 32, "L": 65})  # same bucket
    assert s2.cache_hit and s2.variant is s1.variant
    s3 = sel.select({"B": 33, "L": 65})  # new bucket for B
    assert not s3.cache_hit and s3.profile.range_map["B"] == (33, 33, 64)
    d = sel.describe()
    assert (d["specializations"], d["cache_hits"]) == (2, 1)
    assert built.count("generic") == 1 and len(built) == 4


def test_specialize_without_profiles():
    sel, built = selector("specialize", profiles=None)
    assert sel.select({"B": 3, "L": 3}).kind == "specialization"
    assert sel.select({"B": 4, "L": 4}).cache_hit
    assert selector("error", profiles=None)[0].select({"B": 3, "L": 3}).kind == "generic"


def test_specialization_budget():
    sel, _ = selector("specialize", budget={"B": 2, "L": 8}, profiles=[{"B": (1, 4, 8)}])
    assert sel.select({"B": 9, "L": 3}).kind == "specialization"  # B bucket (8, 16]
    assert sel.select({"B": 17, "L": 3}).kind == "specialization"  # B bucket (16, 32]
    over = sel.select({"B": 33, "L": 3})  # a third B bucket: past the budget
    assert over.kind == "generic"
    assert sel.select({"B": 10, "L": 3}).cache_hit  # known buckets still hit the cache
    d = sel.describe()
    assert (d["specializations"], d["cache_hits"], d["budget_exceeded"]) == (2, 1, 1)


def test_bucket_of():
    assert bucket_of(1, 1, 64) == (1, 1)
    assert bucket_of(5, 1, 64) == (5, 8)
    assert bucket_of(8, 1, 64) == (5, 8)
    assert bucket_of(100, 1, 100) == (65, 100)


def test_bad_profiles():
    with pytest.raises(KilnError, match="unknown symbol 'Q'"):
        normalize_profiles([{"Q": (1, 2, 3)}], SYMS)
    with pytest.raises(KilnError, match="min <= opt <= max"):
        normalize_profiles([{"B": (4, 2, 8)}], SYMS)
    with pytest.raises(KilnError, match="outside the declared range 1 <= B <= 64"):
        normalize_profiles([{"B": (1, 2, 80)}], SYMS)
    with pytest.raises(KilnError, match="policy must be one of"):
        ProfileSelector([], SYMS, lambda p: None, "fast")
    named = normalize_profiles({"small": {"B": (1, 2, 8)}}, SYMS)
    assert named[0].name == "small"
