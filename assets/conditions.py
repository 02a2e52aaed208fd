"""Automation conditions that react to changed data, not to new events, and never request
an asset in the same tick as one of its dependencies.

Dagster's `any_deps_updated()` fires on every new materialization of a dependency, and a
re-run that found its output in the stage cache still records one: a backfill over
shards that were already done would then queue the re-encoding of every one of them.
Our materializations carry the stage's cache key as their data version, the same on a
cache hit, so reacting to a changed data version reacts only to changed data.

`any_deps_updated()` also counts a dependency that "will be requested" on the same tick.
A child requested with its parent may then share the parent's run, where a batch step
(which reports its shards by events, not outputs: `assets.batch`) leaves it skipped, or
run beside the parent on the parent's old output. So a child waits until its parent's
new version is there."""

import dagster as dg

AC = dg.AutomationCondition


def changed_deps(ignore: tuple[str, ...] = ()) -> dg.AutomationCondition:
    """A dependency's data version changed (since the condition was last handled, with
    `.since_last_handled()` on the result's first part), and none is requested this tick.
    Dependencies in `ignore` do not trigger (they may still hold the asset back)."""
    changed = AC.any_deps_match(AC.data_version_changed())
    if ignore:
        changed = changed.ignore(dg.AssetSelection.assets(*ignore))
    return changed.with_label("any_deps_changed")


def no_dep_requested() -> dg.AutomationCondition:
    return (~AC.any_deps_match(AC.will_be_requested())).with_label("no dependency requested this tick")
