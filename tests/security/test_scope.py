"""Tenant scopes in names: what clients may send, and how stores encode scoped names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.core.scope import scoped, split_scope
from airlane.eventlog.checks import check_name
from airlane.eventlog.errors import InvalidLogName
from airlane.eventlog.nats_codec import name_from_token, name_token
from airlane.registry import InvalidSubject
from airlane.registry.schemas import check_subject
from airlane.registry.store import subject_of_token, subject_token

NAME = st.text("abcXYZ019._-", min_size=1, max_size=40)
TENANT = st.one_of(st.none(), st.text("abcXYZ019._-", min_size=1, max_size=20))


@given(TENANT, NAME)
def test_a_scoped_name_splits_back(tenant: str | None, name: str) -> None:
    assert split_scope(scoped(tenant, name)) == (tenant, name)


@given(TENANT, NAME, TENANT, NAME)
def test_store_tokens_round_trip_and_never_collide(
    tenant: str | None, name: str, other_tenant: str | None, other: str
) -> None:
    one, two = scoped(tenant, name), scoped(other_tenant, other)
    assert name_from_token(name_token(one)) == one
    assert subject_of_token(subject_token(one)) == one
    if one != two:
        assert name_token(one) != name_token(two)
        assert subject_token(one) != subject_token(two)


def test_clients_cannot_name_a_scope() -> None:
    with pytest.raises(InvalidLogName):
        check_name("@bob/orders", scoped=False)
    with pytest.raises(InvalidSubject):
        check_subject("@bob/order.v1", scoped=False)
    assert check_name("@bob/orders") == "@bob/orders"  # what the gateway stores
    with pytest.raises(InvalidLogName):
        check_name("@" + "t" * 64 + "/" + "n" * 150)  # tenant and name: 200 at most
