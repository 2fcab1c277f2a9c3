"""Who may be preempted for whom (architecture: Vocabulary, invariant 5): disabled, fence, priority.

The rules are pure functions of the queue tree; they are checked on a tree that has every case, against
a table and against an independent re-derivation from the config (the simulator's checker's helpers),
and then through the cache: a proposal that breaks a rule is refused whatever the quotas say.
"""

from __future__ import annotations

import itertools

import pytest

from sniper.core.config import parse_partition
from sniper.core.preemption.rules import may_preempt_for, preemption_disabled
from sniper.core.state import PartitionState, Queue
from sniper.simulator.model import _lineage, _parting, _within
from tests.core_support import queue
from tests.preemption_support import PreemptHarness, preemption_raw, proposal

# root
#   off (disabled)      -> off.x, off.y
#   team (fence)        -> team.x, team.y (priority 3), team.sub (fence) -> team.sub.z
#   hi (priority 10)    -> hi.x
#   mid (priority 5)    -> mid.top (priority 100), mid.low (priority -1)
#   plain               (leaf, priority 0)
#   solo (leaf, disabled)
#   lone (leaf, fence)
TREE = preemption_raw(
    queue("off", queue("x"), queue("y"), preemption_policy="disabled"),
    queue(
        "team",
        queue("x"),
        queue("y", priority_offset="3"),
        queue("sub", queue("z"), preemption_policy="fence"),
        preemption_policy="fence",
    ),
    queue("hi", queue("x"), priority_offset="10"),
    queue("mid", queue("top", priority_offset="100"), queue("low", priority_offset="-1"), priority_offset="5"),
    queue("plain"),
    queue("solo", preemption_policy="disabled"),
    queue("lone", preemption_policy="fence"),
)


@pytest.fixture(scope="module")
def tree() -> PartitionState:
    return PartitionState("default", parse_partition(TREE))


def q(state: PartitionState, path: str) -> Queue:
    return state.queues[f"root.{path}"]


@pytest.mark.parametrize(
    ("path", "disabled"),
    [
        ("off", True),
        ("off.x", True),  # under a disabled parent
        ("off.y", True),
        ("solo", True),
        ("team.x", False),
        ("team.sub.z", False),
        ("plain", False),
        ("hi.x", False),
    ],
)
def test_preemption_disabled_covers_the_subtree(tree: PartitionState, path: str, disabled: bool) -> None:
    assert preemption_disabled(q(tree, path)) is disabled


@pytest.mark.parametrize(
    ("victim", "beneficiary", "allowed", "why"),
    [
        # disabled: never a victim, whoever asks (even a higher-priority queue, even a sibling)
        ("off.x", "plain", False, "disabled parent"),
        ("off.x", "off.y", False, "disabled parent, sibling inside"),
        ("off.x", "hi.x", False, "disabled parent, higher priority beneficiary"),
        ("solo", "plain", False, "disabled leaf"),
        ("plain", "off.x", True, "a disabled queue may still benefit"),
        # fence (YuniKorn): an ask inside a fence never preempts outside it; asks from outside may
        # still preempt inside by the usual rules
        ("team.x", "plain", True, "an ask from outside may preempt inside the fence"),
        ("team.x", "hi.x", True, "from outside, a higher priority preempts inside the fence"),
        ("team.x", "team.y", True, "inside the fence"),
        ("team.sub.z", "team.x", True, "into an inner fence from inside the outer one"),
        ("team.x", "team.sub.z", False, "an inner fence's ask never preempts outside it"),
        ("lone", "plain", True, "a fenced leaf may be preempted from outside"),
        ("plain", "team.x", False, "an ask in a fence never preempts outside it"),
        ("plain", "lone", False, "a fenced leaf's ask never preempts outside it"),
        ("off.x", "team.x", False, "disabled whatever the fence"),
        # priority: never for a lower-priority queue, compared where the paths part
        ("plain", "hi.x", True, "lower for higher"),
        ("hi.x", "plain", False, "higher for lower"),
        ("plain", "mid.low", True, "mid (5) > plain (0) where the paths part, whatever mid.low's own -1"),
        ("mid.top", "plain", False, "mid (5) > plain (0): mid.top's own 100 does not matter"),
        ("hi.x", "mid.top", False, "hi (10) > mid (5) where the paths part, whatever mid.top's own 100"),
        ("mid.top", "hi.x", True, "mid (5) < hi (10)"),
        ("mid.low", "mid.top", True, "siblings: -1 for 100"),
        ("mid.top", "mid.low", False, "siblings: 100 for -1"),
        ("team.y", "team.x", False, "siblings inside a fence: 3 for 0"),
        ("team.x", "team.y", True, "siblings inside a fence: 0 for 3"),
        ("plain", "plain", False, "never for itself"),
    ],
)
def test_may_preempt_for(tree: PartitionState, victim: str, beneficiary: str, allowed: bool, why: str) -> None:
    assert may_preempt_for(q(tree, victim), q(tree, beneficiary)) is allowed, why


def _independent(cfg: dict[str, tuple[str, int]], victim: str, beneficiary: str) -> bool:
    """The same rules re-derived from the config alone (paths, policies, offsets)."""
    if victim == beneficiary:
        return False
    chain = _lineage(victim)
    if any(cfg[x][0] == "disabled" for x in chain):
        return False
    if any(cfg[x][0] == "fence" and not _within(victim, x) for x in _lineage(beneficiary)):
        return False
    parted = _parting(victim, beneficiary)
    return parted is None or cfg[parted[0]][1] <= cfg[parted[1]][1]


def test_rules_agree_with_the_checkers_reading_of_the_config(tree: PartitionState) -> None:
    config = parse_partition(TREE)
    cfg = {x.path: (x.preemption_policy, x.priority_offset) for x in config.queues()}
    leaves = [x for x in tree.queues.values() if x.is_leaf]
    assert len(leaves) == 11
    disagreements = [
        (v.path, b.path)
        for v, b in itertools.product(leaves, leaves)
        if may_preempt_for(v, b) is not _independent(cfg, v.path, b.path)
    ]
    assert disagreements == []
    # and the tree is rich enough that both answers occur often
    answers = [may_preempt_for(v, b) for v, b in itertools.product(leaves, leaves)]
    assert answers.count(True) > 10 and answers.count(False) > 10


# ---------------------------------------------------------------------- the cache enforces them


@pytest.mark.parametrize(
    ("c_props", "victim_in", "reason"),
    [
        ({"preemption_policy": "disabled"}, "c", "root.c may not be preempted for root.a"),
        ({"preemption_policy": "fence"}, "c", "below its guarantee or ideal"),  # a fence stops only asks inside
        ({"priority_offset": "5"}, "c", "root.c may not be preempted for root.a"),
        ({}, "c", "below its guarantee or ideal"),  # c is at its ideal: no quota, but no rule broken
        ({"preemption_policy": "disabled"}, "b", None),
        ({"priority_offset": "5"}, "b", None),
    ],
)
def test_the_cache_refuses_a_proposal_that_breaks_a_queue_rule(
    c_props: dict[str, str], victim_in: str, reason: str | None
) -> None:
    """a (150) asks; b (75) borrowed two nodes; c (75) holds a third. The queue rules are checked before
    the quotas, so a protected c is refused for the rule, an unprotected one for its quota."""
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 150}),
        queue("b", guaranteed={"memory": 75}),
        queue("c", guaranteed={"memory": 75}, **c_props),
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2", "n3")
    in_b = h.fill("b1", "root.b", "n1", [50, 50]) + h.fill("b1", "root.b", "n2", [50, 50])
    in_c = h.fill("c1", "root.c", "n3", [50, 50])
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    victim, node = (in_c[0], "n3") if victim_in == "c" else (in_b[0], "n1")
    outcome, _ = h.commit(proposal("a1", "big", node, [victim]))
    if reason is None:
        assert outcome.accepted == 1 and not outcome.rejected
        assert [x.allocation for x in h.preempts()] == [victim]
    else:
        assert outcome.accepted == 0
        (why,) = outcome.rejected.values()
        assert reason in why
        assert h.preempts() == [] and not h.cache.state.reservations
        assert not h.alloc(victim).preempting
    assert h.model.violations == []


@pytest.mark.parametrize(
    ("props", "a_props", "asked"),
    [
        # the ideal already accounts for these: root.a is not even below its ideal, no request goes out
        ({"preemption_policy": "disabled"}, {}, False),
        ({"priority_offset": "5"}, {}, False),
        # a fence is not in the ideal: the allocator is asked, finds no victim it may take, says so
        ({}, {"preemption_policy": "fence"}, True),
    ],
)
def test_a_protected_queue_is_never_offered_as_a_victim(
    props: dict[str, str], a_props: dict[str, str], asked: bool
) -> None:
    """The sniper round never proposes what the cache would refuse: the only room is the protected queue's
    (b disabled or of higher priority), or the asker is fenced in (a fence stops the asks inside it)."""
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}, **a_props), queue("b", guaranteed={"memory": 100}, **props)
    )
    h = PreemptHarness(raw)
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [50, 50])
    h.fill("b1", "root.b", "n2", [50, 50])
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    result = h.preempt_round(10.0)
    assert (result.reply is not None) is asked
    assert result.placements == []
    if result.reply is not None:
        assert result.reply.unplaceable == ["a1/big"]
    assert h.preempts() == []
