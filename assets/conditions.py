"""Automation conditions that react to changed data, not to new events.

Dagster's `any_deps_updated()` fires on every new materialization of a dependency, and a
re-run that found its output in the stage cache still records one: a backfill over
shards that were already done would then queue the re-encoding of every one of them.
Our materializations carry the stage's cache key as their data version, the same on a
cache hit, so reacting to a changed data version reacts only to changed data."""

import dagster as dg

AC = dg.AutomationCondition


def changed_deps() -> dg.AutomationCondition:
    """Like `AC.any_deps_updated()`, but a dependency counts only if its data version changed
    (or it will be requested on this tick)."""
    return AC.any_deps_match(AC.data_version_changed() | AC.will_be_requested()).with_label("any_deps_changed")
