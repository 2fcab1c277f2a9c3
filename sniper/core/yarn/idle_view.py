"""Whether YARN's proportional round chooses no container on a partition's view, read off the view alone.

Owns :func:`chooses_nothing` and the leaves' deadzones it reads (:func:`leaf_deadzones`, a function of the
config alone). When it answers ``True`` the round (:meth:`ProportionalPolicy.round` on
:func:`~sniper.core.preemption.view.snapshot_from_state` with containers) selects, marks, kills and
unreserves nothing and refuses no app's budget, in either pass, whatever its ideal assignment; the only
state it changes is the horizon expiry of the marks it tracks (:meth:`ProportionalPolicy.expire`). On
``False`` nothing is claimed and the caller runs the round.

Why. The condition: the capacity holds no negative figure, and every leaf whose preemption is not disabled
uses (gross: allocated plus reserved) on every resource at most its deadzone
``trunc(guaranteed * (1 + max_ignored_over_capacity))`` (:func:`~sniper.core.yarn.proportional.deadzone`),
a resource either one lacks counting zero.

1. The snapshot gives each leaf that usage and its configured guarantee as they are (guarantees are not
   composed for YARN's baseline); the cluster is the capacity; the dominant calculator knows some names
   ``N``, which include every name of the capacity, the guarantees, the usages and the pending.
2. ``_to_obtain`` acts on a leaf only when ``calc.gt(cluster, used, deadzone)``. That never holds here.
   If some name of ``N`` has no capacity, the comparison is component-wise and ``used`` is larger on no
   name. Else every divisor is positive: each share ``used[n] / d`` is at most ``deadzone[n] / d`` (IEEE
   division by a positive number is monotone), so the ``i``-th largest share of the usage is at most the
   ``i``-th largest of the deadzone, and the share tuples compare ``<=``. So every leaf's target is
   empty, whatever :func:`~sniper.core.preemption.ideal.compute_ideal` found (priority layers as
   configured, the round's allowance, with or without the balance pass), and it is the same function in
   the preempt-to-balance pass, whose ideal differs but whose deadzone does not.
3. ``_Selection.run``: with no candidate yet, ``_deduct_selected`` leaves the empty target empty, and the
   empty resource is positive in neither order of the calculator, so ``_select_from`` runs for no leaf:
   no candidate, no dropped reservation, no budget refusal, the allowance untouched; the balance pass
   then finds the same. With no candidate nothing is marked or becomes killable; the tracked marks older
   than the horizon are dropped (not in observe-only mode, where nothing is tracked).
4. Neither the snapshot nor the fix-point changes anything a later round reads but the kept app
   snapshots, which have heard every change since their last build (``on_change``): a later round's
   ``begin`` keeps exactly the apps no change touched, as after a round it skipped on an unchanged view.

The round's figures (each queue's ideal) are not computed: a caller that reads them (node reservations
to cancel) must establish on its own that it would not.
"""

from __future__ import annotations

from sniper.core.config import PartitionConfig
from sniper.core.resources import Resource, add
from sniper.core.state import PartitionState
from sniper.core.yarn.proportional import ProportionalConfig, deadzone

LeafDeadzones = tuple[tuple[str, Resource], ...]


def leaf_deadzones(config: PartitionConfig, cfg: ProportionalConfig) -> LeafDeadzones:
    """Every leaf whose preemption is not disabled, in pre-order, with its deadzone under ``cfg``."""
    return tuple(
        (q.path, deadzone(q.guaranteed, cfg))
        for q in config.queues()
        if q.is_leaf and q.preemption_policy != "disabled"
    )


def chooses_nothing(state: PartitionState, deadzones: LeafDeadzones) -> bool:
    """Whether every leaf of ``deadzones`` (:func:`leaf_deadzones` of the state's config) uses at most its
    deadzone on every resource, the capacity holding no negative figure: then YARN's round on ``state``
    chooses no container."""
    if state.config is None or any(v < 0 for v in state.capacity.values()):
        return False
    queues = state.queues
    for path, limit in deadzones:
        held = queues.get(path)
        used = {} if held is None else add(held.allocated, held.reserved)
        for k, v in used.items():
            if v > limit.get(k, 0):
                return False
        for k, v in limit.items():
            if v < 0 and k not in used:
                return False
    return True
