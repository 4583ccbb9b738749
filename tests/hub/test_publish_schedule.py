"""The home log writer's wait between publishes follows the flow of appends (pure: no broker,
no clock; ``took`` is given the time)."""

from __future__ import annotations

import math

import pytest

from airlane.hub.jetstream.schedule import (
    BUSY_EVENTS_S,
    FLOW_TAU_S,
    LIGHT_EVENTS_S,
    PublishSchedule,
)

LIGHT_S = 0.005
BUSY_S = 0.020


def flowing(schedule: PublishSchedule, events_s: float, *, seconds: float, start: float) -> float:
    """Takes at the schedule's own wait, carrying what ``events_s`` brings meanwhile; the
    time after the last."""
    now = start
    while now < start + seconds:
        interval = schedule.linger_s
        now += interval
        schedule.took(round(events_s * interval), now)
    return now


def test_a_new_writer_waits_the_light_time():
    schedule = PublishSchedule(LIGHT_S, BUSY_S)
    assert schedule.linger_s == LIGHT_S
    schedule.took(500, 10.0)  # the first take has nothing to measure a flow over
    assert schedule.linger_s == LIGHT_S


def test_a_busy_flow_waits_the_busy_time_and_a_light_one_the_light_time():
    schedule = PublishSchedule(LIGHT_S, BUSY_S)
    schedule.took(0, 0.0)
    flowing(schedule, 2 * BUSY_EVENTS_S, seconds=2.0, start=0.0)
    assert schedule.flow == pytest.approx(2 * BUSY_EVENTS_S, rel=0.05)
    assert schedule.linger_s == BUSY_S

    light = PublishSchedule(LIGHT_S, BUSY_S)
    light.took(0, 0.0)
    flowing(light, LIGHT_EVENTS_S / 2, seconds=2.0, start=0.0)
    assert light.linger_s == LIGHT_S


def test_between_the_two_flows_the_wait_is_in_proportion():
    schedule = PublishSchedule(LIGHT_S, BUSY_S)
    schedule.took(0, 0.0)
    midway = (LIGHT_EVENTS_S + BUSY_EVENTS_S) / 2
    flowing(schedule, midway, seconds=3.0, start=0.0)
    assert schedule.linger_s == pytest.approx((LIGHT_S + BUSY_S) / 2, rel=0.05)


def test_the_first_append_after_a_quiet_moment_waits_only_the_light_time():
    schedule = PublishSchedule(LIGHT_S, BUSY_S)
    schedule.took(0, 0.0)
    end = flowing(schedule, 2 * BUSY_EVENTS_S, seconds=2.0, start=0.0)
    assert schedule.linger_s == BUSY_S
    schedule.took(1, end + 1.0)  # one append, a second later
    assert schedule.linger_s == LIGHT_S


def test_a_flow_that_changes_is_followed_within_a_second():
    schedule = PublishSchedule(LIGHT_S, BUSY_S)
    schedule.took(0, 0.0)
    end = flowing(schedule, LIGHT_EVENTS_S / 2, seconds=1.0, start=0.0)
    end = flowing(schedule, 2 * BUSY_EVENTS_S, seconds=1.0, start=end)
    assert schedule.linger_s == BUSY_S
    flowing(schedule, LIGHT_EVENTS_S / 2, seconds=1.0, start=end)
    assert schedule.linger_s == LIGHT_S


def test_takes_at_one_instant_count_with_the_next():
    schedule = PublishSchedule(LIGHT_S, BUSY_S)
    schedule.took(0, 0.0)
    schedule.took(60, 0.01)
    flow = schedule.flow
    schedule.took(1_000, 0.01)  # no time has passed: nothing to divide by yet
    assert schedule.flow == flow
    schedule.took(0, 0.02)
    assert schedule.flow > flow


def test_a_busy_time_under_the_light_one_means_one_fixed_wait():
    schedule = PublishSchedule(0.030, 0.010)
    schedule.took(0, 0.0)
    flowing(schedule, 2 * BUSY_EVENTS_S, seconds=2.0, start=0.0)
    assert schedule.linger_s == 0.030


def test_a_report_during_a_silence_sees_the_flow_fall_while_the_writer_keeps_its_estimate():
    schedule = PublishSchedule(LIGHT_S, BUSY_S)
    schedule.took(0, 0.0)
    end = flowing(schedule, 2 * BUSY_EVENTS_S, seconds=2.0, start=0.0)
    busy = schedule.flow
    assert schedule.flow_at(end) == busy and schedule.linger_at(end) == BUSY_S
    # A tenth of a second of silence: the estimate a report shows falls by exp(-0.1 / tau).
    assert schedule.flow_at(end + 0.1) == pytest.approx(busy * math.exp(-0.1 / FLOW_TAU_S))
    assert schedule.flow_at(end + 5.0) < 1.0 and schedule.linger_at(end + 5.0) == LIGHT_S
    assert schedule.flow == busy  # looking changes nothing


def test_the_publish_time_shown_follows_the_last_few_publishes():
    schedule = PublishSchedule(LIGHT_S, BUSY_S)
    assert schedule.publish_s == 0.0
    for _ in range(30):
        schedule.published(0.012)
    assert schedule.publish_s == pytest.approx(0.012, rel=0.01)
    for _ in range(20):
        schedule.published(0.002)
    assert schedule.publish_s == pytest.approx(0.002, abs=0.0002)
