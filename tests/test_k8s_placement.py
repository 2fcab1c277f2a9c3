"""YuniKorn's placement rules: parsed and checked with the configuration, applied to pods as YuniKorn's core
applies them (order, create, parent, filter, fully qualified names, the default queue), and queues a rule
creates added to the configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sniper.core.config import (
    ConfigError,
    PartitionConfig,
    PlacementFilter,
    PlacementRuleConfig,
    load_config,
    parse_config,
    parse_partition,
    partition_to_raw,
)
from sniper.kubernetes.objects import KubeObjectError
from sniper.kubernetes.placement import (
    AppFacts,
    Placement,
    PlacementError,
    app_facts,
    place,
    pod_user,
    with_queues,
)

DATA = Path(__file__).parent / "data" / "yunikorn"


def config(queues: list[dict[str, Any]], rules: list[dict[str, Any]] | None = None) -> PartitionConfig:
    raw: dict[str, Any] = {"name": "default", "queues": [{"name": "root", "queues": queues}]}
    if rules is not None:
        raw["placementrules"] = rules
    return parse_partition(raw)


def pod(
    namespace: str = "ml",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    user: str | None = None,
    groups: list[str] | None = None,
) -> dict[str, Any]:
    notes = dict(annotations or {})
    if user is not None:
        notes["yunikorn.apache.org/user.info"] = json.dumps({"user": user, "groups": groups or []})
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels or {}, "annotations": notes}}


def namespace(
    name: str = "ml", *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}}}


def placed(cfg: PartitionConfig, p: dict[str, Any], ns: dict[str, Any] | None = None) -> Placement:
    return place(cfg.placement_rules, app_facts(p, ns), cfg)


# --- parsing ---------------------------------------------------------------------------------------------


def test_placement_rules_parse_typed_and_survive_the_round_trip_through_a_partition_config() -> None:
    cfg = config(
        [{"name": "sandbox"}],
        [
            {
                "name": "User",
                "create": True,
                "parent": {"name": "fixed", "value": "root.users"},
                "filter": {"type": "deny", "users": ["root", "admin"], "groups": ["^ops-.*"]},
            },
            {"name": "tag", "value": "namespace", "create": True},
        ],
    )
    assert cfg.placement_rules == (
        PlacementRuleConfig(
            name="user",
            create=True,
            parent=PlacementRuleConfig(name="fixed", value="root.users"),
            filter=PlacementFilter(deny=True, users=("root", "admin"), groups=("^ops-.*",)),
        ),
        PlacementRuleConfig(name="tag", value="namespace", create=True),
    )
    assert not [w for w in cfg.warnings if "placementrules" in w]
    assert parse_partition(partition_to_raw(cfg)) == cfg


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ({"name": "recovery"}, r"placementrules\[0\]\.name: 'recovery' is not one of provided, user, fixed, tag"),
        ({"name": "fixed"}, r"placementrules\[0\]\.value: a fixed rule needs a value \(the queue\)"),
        ({"name": "tag"}, r"placementrules\[0\]\.value: a tag rule needs a value \(the tag\)"),
        ({"name": "fixed", "value": "root.a b"}, r"placementrules\[0\]\.value: 'root\.a b' is not a queue"),
        (
            {"name": "user", "filter": {"type": "maybe"}},
            r"placementrules\[0\]\.filter\.type: 'maybe' is not one of allow",
        ),
        (
            {"name": "user", "filter": {"users": ["(unclosed"]}},
            r"placementrules\[0\]\.filter\.users: '\(unclosed' is no name and no regular",
        ),
        (
            {"name": "user", "filter": {"groups": ["9lives"]}},
            r"placementrules\[0\]\.filter\.groups: '9lives' is no name",
        ),
        ({"name": "user", "parent": {"name": "nope"}}, r"placementrules\[0\]\.parent\.name: 'nope' is not one of"),
        ({"name": "user", "creat": True}, r"placementrules\[0\]: unknown key 'creat' \(did you mean 'create'\?\)"),
    ],
)
def test_a_bad_placement_rule_is_a_config_error_naming_where(rule: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"^partition default\." + fragment):
        config([{"name": "a"}], [rule])


def test_yunikorns_parent_queue_mapping_example_places_namespaces_under_their_parent_queue() -> None:
    cfg = load_config(DATA / "resource_quota_mgmt_parent.yaml").partition("default")
    ns = namespace("checkout", annotations={"yunikorn.apache.org/parentqueue": "root.production"})
    assert placed(cfg, pod("checkout"), ns) == Placement(queue="root.production.checkout", create=True)
    grown = with_queues(cfg, ["root.production.checkout"])
    assert grown.leaf("root.production.checkout") is not None
    assert placed(grown, pod("checkout"), ns) == Placement(queue="root.production.checkout", create=False)
    # no parent queue annotated: the parent rule does not match, so neither does the rule: refused
    with pytest.raises(PlacementError, match="no placement rule placed"):
        placed(cfg, pod("scratch"), namespace("scratch"))


# --- the rules --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "annotations", "queue"),
    [
        ({"queue": "root.batch"}, {}, "root.batch"),
        ({"yunikorn.apache.org/queue": "root.batch"}, {}, "root.batch"),
        ({"queue": "root.ml"}, {"yunikorn.apache.org/queue": "root.batch"}, "root.batch"),  # the annotation first
        ({"queue": "batch"}, {}, "root.batch"),  # unqualified: under root
    ],
)
def test_without_rules_the_queue_the_pod_names_is_taken(
    labels: dict[str, str], annotations: dict[str, str], queue: str
) -> None:
    cfg = config([{"name": "batch"}, {"name": "ml"}])
    assert placed(cfg, pod(labels=labels, annotations=annotations)) == Placement(queue=queue, create=False)


def test_without_rules_a_pod_naming_no_existing_queue_runs_in_its_namespaces_queue_created_if_needed() -> None:
    cfg = config([{"name": "batch"}, {"name": "ml"}])
    assert placed(cfg, pod("ml")) == Placement(queue="root.ml", create=False)
    assert placed(cfg, pod("web")) == Placement(queue="root.web", create=True)
    assert placed(cfg, pod("web", labels={"queue": "root.nowhere"})) == Placement(queue="root.web", create=True)


def test_a_rule_that_names_a_parent_queue_does_not_place_the_app_the_next_rule_does() -> None:
    cfg = config(
        [{"name": "teams", "queues": [{"name": "a"}]}, {"name": "ml"}],
        [{"name": "provided"}, {"name": "tag", "value": "namespace"}],
    )
    assert placed(cfg, pod("ml", labels={"queue": "root.teams"})) == Placement(queue="root.ml", create=False)


def test_create_false_needs_an_existing_queue_and_create_true_makes_one_under_a_parent_only() -> None:
    cfg = config(
        [{"name": "users", "parent": True}, {"name": "leafy"}, {"name": "fallback"}],
        [
            {"name": "user", "parent": {"name": "fixed", "value": "leafy"}, "create": True},  # under a leaf: no
            {"name": "user", "parent": {"name": "fixed", "value": "users"}},  # create false: no such queue
            {"name": "user", "parent": {"name": "fixed", "value": "users"}, "create": True},
        ],
    )
    with pytest.raises(PlacementError, match=r"parent rule gave the leaf queue root\.leafy"):
        placed(cfg, pod(user="alice"))
    cfg = parse_partition(
        {
            **partition_to_raw(cfg),
            "placementrules": [
                {"name": "user", "parent": {"name": "fixed", "value": "users"}},
                {"name": "user", "parent": {"name": "fixed", "value": "users"}, "create": True},
            ],
        }
    )
    assert placed(cfg, pod(user="alice")) == Placement(queue="root.users.alice", create=True)
    grown = with_queues(cfg, ["root.users.alice"])
    assert placed(grown, pod(user="alice")) == Placement(queue="root.users.alice", create=False)


def test_a_created_queue_never_lands_under_a_leaf() -> None:
    cfg = config([{"name": "leafy"}, {"name": "default"}], [{"name": "provided", "create": True}])
    assert placed(cfg, pod(labels={"queue": "root.leafy.child"})) == Placement(queue="root.default", create=False)


def test_the_user_rule_replaces_dots_and_reads_yunikorns_user_info() -> None:
    cfg = config([{"name": "default"}], [{"name": "user", "create": True}])
    assert placed(cfg, pod(user="jane.doe")) == Placement(queue="root.jane_dot_doe", create=True)
    assert placed(cfg, pod()) == Placement(queue="root.nobody", create=True)  # YuniKorn's default user


@pytest.mark.parametrize(
    ("rule_filter", "user", "groups", "queue"),
    [
        ({"type": "allow", "users": ["alice", "bob"]}, "alice", [], "root.alice"),
        ({"type": "allow", "users": ["alice", "bob"]}, "carol", [], "root.default"),
        ({"type": "allow", "groups": ["ml"]}, "carol", ["web", "ml"], "root.carol"),
        ({"type": "deny", "users": ["alice"]}, "alice", [], "root.default"),
        ({"type": "deny", "users": ["alice"]}, "bob", [], "root.bob"),
        ({"users": ["^svc-.*"]}, "svc-etl", [], "root.svc-etl"),  # one entry with a pattern character: a pattern
        ({"users": ["^svc-.*"]}, "alice", [], "root.default"),
        ({"type": "deny", "groups": ["^contractors$"]}, "dan", ["contractors"], "root.default"),
    ],
)
def test_a_rules_filter_lets_in_the_users_and_groups_it_lists_or_everyone_else(
    rule_filter: dict[str, Any], user: str, groups: list[str], queue: str
) -> None:
    cfg = config([{"name": "default"}], [{"name": "user", "create": True, "filter": rule_filter}])
    assert placed(cfg, pod(user=user, groups=groups)).queue == queue


def test_the_fixed_rule_places_in_its_queue_qualified_or_under_its_parent() -> None:
    cfg = config(
        [{"name": "batch", "queues": [{"name": "etl"}]}, {"name": "adhoc"}],
        [
            {"name": "fixed", "value": "root.batch.etl", "filter": {"groups": ["etl"]}},
            {"name": "fixed", "value": "adhoc"},
        ],
    )
    assert placed(cfg, pod(user="u", groups=["etl"])) == Placement(queue="root.batch.etl", create=False)
    assert placed(cfg, pod(user="u", groups=["web"])) == Placement(queue="root.adhoc", create=False)


def test_the_tag_rule_reads_the_namespace_and_its_labels_and_annotations() -> None:
    cfg = config(
        [{"name": "teams", "parent": True}],
        [{"name": "tag", "value": "Team", "create": True, "parent": {"name": "fixed", "value": "root.teams"}}],
    )
    ns = namespace("ml", labels={"team": "vision"})
    assert placed(cfg, pod(), ns) == Placement(queue="root.teams.vision", create=True)
    annotated = namespace("ml", labels={"team": "vision"}, annotations={"team": "speech"})
    assert placed(cfg, pod(), annotated).queue == "root.teams.speech"
    with pytest.raises(PlacementError):
        placed(cfg, pod(), namespace("ml"))  # no such tag, no root.default


def test_an_invalid_queue_name_from_a_pod_is_an_error() -> None:
    cfg = config([{"name": "default"}], [{"name": "provided", "create": True}])
    with pytest.raises(PlacementError, match="'bad name' is not a valid queue name"):
        placed(cfg, pod(labels={"queue": "bad name"}))
    with pytest.raises(PlacementError, match="not a valid queue path"):
        placed(cfg, pod(labels={"queue": "root..x"}))


def test_no_rule_matching_falls_back_to_root_default_only_when_it_is_a_leaf() -> None:
    rules = [{"name": "provided"}]
    assert placed(config([{"name": "default"}], rules), pod()) == Placement(queue="root.default", create=False)
    with pytest.raises(PlacementError, match="no placement rule placed the application of user 'nobody'"):
        placed(config([{"name": "default", "queues": [{"name": "x"}]}], rules), pod())


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("{", "not JSON"), (json.dumps({"user": 7}), "expected"), (json.dumps({"user": "u", "groups": "g"}), "expected")],
)
def test_a_malformed_user_info_is_a_clear_error(text: str, fragment: str) -> None:
    with pytest.raises(KubeObjectError, match=f"pod ml/p: annotation yunikorn.apache.org/user.info: {fragment}"):
        pod_user(pod(annotations={"yunikorn.apache.org/user.info": text}))


def test_app_facts_read_the_pods_user_queue_and_namespace_tags() -> None:
    facts = app_facts(
        pod("ml", labels={"queue": "root.x"}, user="ann", groups=["g1"]),
        namespace("ml", labels={"Team": "v"}, annotations={"yunikorn.apache.org/parentqueue": "root.p"}),
    )
    assert facts == AppFacts(
        user="ann",
        groups=("g1",),
        provided="root.x",
        tags={
            "team": "v",
            "yunikorn.apache.org/parentqueue": "root.p",
            "namespace.parentqueue": "root.p",
            "namespace": "ml",
        },
    )


# --- adding the queues rules create -----------------------------------------------------------------------


def test_with_queues_adds_leaves_and_the_parents_they_need_and_keeps_the_rest() -> None:
    cfg = config([{"name": "a", "resources": {"guaranteed": {"memory": "1Gi"}}}], [{"name": "user", "create": True}])
    grown = with_queues(cfg, ["root.b", "root.teams.vision"])
    assert [q.path for q in grown.queues()] == ["root", "root.a", "root.b", "root.teams", "root.teams.vision"]
    teams = next(q for q in grown.queues() if q.path == "root.teams")
    assert teams.declared_parent and not teams.is_leaf
    assert grown.leaf("root.a") == cfg.leaf("root.a")
    assert grown.placement_rules == cfg.placement_rules


def test_with_queues_refuses_a_queue_outside_root_and_may_grow_an_unused_leaf() -> None:
    cfg = config([{"name": "a", "resources": {"max": {"memory": "1Gi"}}}])
    with pytest.raises(PlacementError, match=r"cannot add queue 'x\.y': not under root"):
        with_queues(cfg, ["x.y"])
    assert with_queues(cfg, ["root.a.b"]).leaf("root.a.b") is not None  # a leaf with no apps may become a parent


def test_the_documented_example_places_as_its_comments_say() -> None:
    text = (Path(__file__).parent.parent / "docs" / "config.md").read_text(encoding="utf-8")
    section = text.split("## Placement rules", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = parse_config(yaml.safe_load(example)).partition("default")
    assert placed(cfg, pod(labels={"queue": "root.default"})) == Placement(queue="root.default", create=False)
    production = namespace("shop", annotations={"yunikorn.apache.org/parentqueue": "root.production"})
    assert placed(cfg, pod("shop"), production) == Placement(queue="root.production.shop", create=True)
    assert placed(cfg, pod("lab", user="ann", groups=["ml"]), namespace("lab")) == Placement(
        queue="root.users.ann", create=True
    )
    assert placed(cfg, pod("lab", user="bob", groups=["web"]), namespace("lab")) == Placement(
        queue="root.default", create=False
    )
