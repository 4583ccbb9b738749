"""The RBAC policy language: every matcher, deny over allow, deny by default, identities for
certificate principals, and a clear error for each way a file can be wrong."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from airlane.security import Action, Principal, RequestFacts
from airlane.security.policy import ACTION_NAMES, PolicyError, load_policy, parse_policy

MESH = """
version = 1

[[identities]]
spiffe = "spiffe://example.org/ns/ml/*"
tenant = "ml"
roles = ["trainer"]

[[rules]]
name = "no one deletes logs"
effect = "deny"
principals = ["*"]
actions = ["logs.admin"]

[[rules]]
name = "only the trainer posts model updates"
principals = ["spiffe://example.org/ns/ml/sa/ai-trainer"]
actions = ["artifacts.publish", "logs.append"]
resources = ["artifacts", "logs/model-updates"]
methods = ["post"]
paths = ["/v1/*"]

[[rules]]
name = "readers read"
principals = ["role:reader", "key:ops-*", "claim:scope=read*", "tenant:ml"]
actions = ["subscribe", "logs.read", "artifacts.pull"]

[[rules]]
name = "stable channel only"
principals = ["jwt:app-*"]
actions = ["generate"]
metadata = { "X-Channel" = "stable" }

[[rules]]
name = "guests watch the lobby"
principals = ["anonymous"]
actions = ["subscribe"]
resources = ["lobby/*"]
"""

TRAINER = "spiffe://example.org/ns/ml/sa/ai-trainer"


def http(method: str, path: str, **metadata: str) -> RequestFacts:
    return RequestFacts("http", method, path, metadata)


def spiffe(name: str, request: RequestFacts | None = None) -> Principal:
    return Principal(name, via="spiffe", request=request, roles=frozenset({"trainer"}))


def test_only_the_trainer_may_post_model_updates() -> None:
    policy = parse_policy(_toml(MESH))
    post = http("POST", "/v1/logs/model-updates/events")
    allowed = policy.decide(spiffe(TRAINER, post), "logs.append", "logs/model-updates")
    assert allowed.allowed and allowed.rule == "only the trainer posts model updates"
    for who, action, resource in (
        (spiffe("spiffe://example.org/ns/ml/sa/other", post), "logs.append", "logs/model-updates"),
        (spiffe(TRAINER, http("PUT", "/v1/logs/model-updates")), "logs.append",
         "logs/model-updates"),
        (spiffe(TRAINER, RequestFacts("airc")), "logs.append", "logs/model-updates"),
        (spiffe(TRAINER, post), "logs.append", "logs/other"),
        (Principal(TRAINER, via="key", request=post), "logs.append", "logs/model-updates"),
    ):  # fmt: skip
        decision = policy.decide(who, action, resource)
        assert not decision.allowed and decision.rule is None, (who, decision)
        assert decision.reason == f"no rule allows {action} there"


def test_deny_rules_win_over_allow_rules() -> None:
    policy = parse_policy(_toml(MESH))
    who = Principal("root", roles=frozenset({"reader"}), via="key")
    decision = policy.decide(who, "logs.admin", "logs/x")
    assert not decision.allowed and decision.rule == "no one deletes logs"


def test_every_principal_matcher() -> None:
    policy = parse_policy(_toml(MESH))
    for who in (
        Principal("u", roles=frozenset({"reader"}), via="jwt"),
        Principal("ops-1", via="key"),
        Principal("app", via="jwt", claims={"scope": "read:all"}),
        Principal("x", tenant="ml", via="key"),
    ):
        assert policy.decide(who, "logs.read", "logs/a").rule == "readers read", who
    for who in (
        Principal("ops-1", via="jwt"),  # a JWT subject is not a key's name
        Principal("app", via="jwt", claims={"scope": "write"}),
        Principal("u", roles=frozenset({"writer"}), via="jwt"),
    ):
        assert not policy.decide(who, "logs.read", "logs/a").allowed, who
    guest = Principal("anonymous")
    assert policy.decide(guest, "subscribe", "lobby/1").allowed
    assert not policy.decide(guest, "subscribe", "private").allowed


def test_metadata_is_matched_case_insensitively_by_name() -> None:
    policy = parse_policy(_toml(MESH))
    app = Principal("app-7", via="jwt")
    stable = http("POST", "/v1/chat/completions", **{"x-channel": "stable"})
    canary = http("POST", "/v1/chat/completions", **{"x-channel": "canary"})
    assert policy.decide(Principal("app-7", via="jwt", request=stable), "generate", "c").allowed
    decision = policy.decide(Principal("app-7", via="jwt", request=canary), "generate", "c")
    assert not decision.allowed
    why = {step.rule.name: step.why_not for step in decision.trace}
    assert why["stable channel only"] == "metadata x-channel='canary' does not match 'stable'"
    assert "no 'x-channel' metadata" in str(policy.decide(app, "generate", "c").trace[3].why_not)


def test_identities_name_a_certificate_principal_s_tenant_and_roles() -> None:
    policy = parse_policy(_toml(MESH))
    identity = policy.identity_of(TRAINER)
    assert identity is not None and identity.tenant == "ml" and identity.roles == {"trainer"}
    assert policy.identity_of("spiffe://other.org/ns/ml/sa/x") is None


def test_every_action_has_a_name_rules_can_use() -> None:
    assert set(ACTION_NAMES) == {action.value for action in Action}
    assert {"logs.append", "schemas.register", "artifacts.pull", "delete"} <= set(ACTION_NAMES)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "no [[rules]]"),
        ("version = 2\n[[rules]]\nname='a'\nprincipals=['*']\nactions=['*']", "version 2"),
        ("[[rules]]\nprincipals=['*']\nactions=['*']", "rules[0]: every rule needs a name"),
        ("[[rules]]\nname='a'\nprincipals=['*']\nactions=['logs.apend']",
         "rules[0] ('a'): no action is named 'logs.apend'; actions: generate"),
        ("[[rules]]\nname='a'\nprincipals=['bob']\nactions=['*']", "principal 'bob' is not *"),
        ("[[rules]]\nname='a'\nprincipals=['claim:x']\nactions=['*']", "claim:NAME=VALUE"),
        ("[[rules]]\nname='a'\nactions=['*']", "principals is required"),
        ("[[rules]]\nname='a'\nprincipals=[]\nactions=['*']", "non-empty list of strings"),
        ("[[rules]]\nname='a'\neffect='maybe'\nprincipals=['*']\nactions=['*']",
         "effect is 'allow' or 'deny'"),
        ("[[rules]]\nname='a'\nprincipals=['*']\nactions=['*']\nresource=['x']",
         "unknown keys ['resource']"),
        ("[[rules]]\nname='a'\nprincipals=['*']\nactions=['*']\n"
         "[[rules]]\nname='a'\nprincipals=['*']\nactions=['*']", "repeated: ['a']"),
        ("[[rules]]\nname='a'\nprincipals=['*']\nactions=['*']\nmetadata={x=1}",
         "metadata is a table of strings"),
        ("rules = 3", "rules must be an array of tables"),
        ("[[identities]]\nspiffe='bob'\n[[rules]]\nname='a'\nprincipals=['*']\nactions=['*']",
         "identities[0]: spiffe must be a SPIFFE ID pattern"),
        ("[[identities]]\nspiffe='spiffe://x/*'\ntenant='no spaces'\n"
         "[[rules]]\nname='a'\nprincipals=['*']\nactions=['*']", "identities[0]: tenant:"),
        ("colour = 'blue'", "unknown top-level keys ['colour']"),
    ],
)  # fmt: skip
def test_a_wrong_file_says_where_and_what(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert str(caught.value).startswith(str(path)), caught.value
    assert said in str(caught.value)


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read the policy"):
        load_policy(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("[[rules]\n")
    with pytest.raises(PolicyError, match="is not valid TOML"):
        load_policy(tmp_path / "bad.toml")


def _toml(text: str) -> dict[str, object]:
    return tomllib.loads(text)
