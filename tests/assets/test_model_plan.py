"""The model half's up-to-date check (`assets.training.plan`), on a real instance with assets
that record their plan tag as the model assets do: a partitioned input (as token_shards
is to base_model) and two unpartitioned assets in a chain, one with a blocking check."""

import dagster as dg

from assets.training.plan import PLAN_TAG, model_fresh, plan_tags
from resources import YunqueSettings

shards = dg.DynamicPartitionsDefinition(name="shards")
VERSIONS: dict[str, str] = {}  # the data version each shard's `parts` reports
CHECK_PASSES = {"child": True}


@dg.asset(partitions_def=shards)
def parts(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(data_version=dg.DataVersion(VERSIONS[context.partition_key]))


@dg.asset(deps=[parts], code_version="1", check_specs=[dg.AssetCheckSpec("sane", asset="child", blocking=True)])
def child(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    planned = plan_tags(context, settings)
    return dg.MaterializeResult(data_version=dg.DataVersion("c"), tags=planned,
                                check_results=[dg.AssetCheckResult(check_name="sane", passed=CHECK_PASSES["child"])])


@dg.asset(deps=[child], code_version="1")
def grandchild(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    return dg.MaterializeResult(data_version=dg.DataVersion("g"), tags=plan_tags(context, settings))


ASSETS = [parts, child, grandchild]
MODEL = [dg.AssetKey("child"), dg.AssetKey("grandchild")]


def _settings(tmp_path, **overrides) -> YunqueSettings:
    return YunqueSettings.build(str(tmp_path), "tiny", overrides)


def _materialize(instance, settings, *names: str, partition: str | None = None) -> None:
    result = dg.materialize(ASSETS, selection=list(names), instance=instance, partition_key=partition,
                            resources={"settings": settings}, raise_on_error=False)
    assert result.success or not CHECK_PASSES["child"]


def _fresh(instance, settings, running=()) -> set[str]:
    graph = dg.Definitions(assets=ASSETS, resources={"settings": settings}).resolve_asset_graph()
    return {k.to_user_string() for k in model_fresh(instance, graph, MODEL, set(running), settings)}


def _everything(instance, settings) -> None:
    for shard in VERSIONS:
        _materialize(instance, settings, "parts", partition=shard)
    _materialize(instance, settings, "child", "grandchild")


def test_up_to_date_until_an_input_the_configuration_or_a_check_says_otherwise(tmp_path):
    settings = _settings(tmp_path)
    VERSIONS.clear()
    VERSIONS.update({"a": "1", "b": "1"})
    CHECK_PASSES["child"] = True
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("shards", ["a", "b"])
        assert _fresh(instance, settings) == set()  # never materialized
        _everything(instance, settings)
        mat = instance.fetch_materializations(dg.AssetKey("child"), limit=1).records[0]
        assert mat.asset_materialization.tags[PLAN_TAG]
        assert _fresh(instance, settings) == {"child", "grandchild"}

        # an input about to run: everything below it must run too
        assert _fresh(instance, settings, running=[dg.AssetKey("parts")]) == set()

        # a shard materialized again with the same data version (a cache hit) is no change
        _materialize(instance, settings, "parts", partition="a")
        assert _fresh(instance, settings) == {"child", "grandchild"}
        # one with a new data version is, and so is a new shard (counted past Dagster's
        # own limit of 100 partitions for a partitioned input's provenance)
        VERSIONS["a"] = "2"
        _materialize(instance, settings, "parts", partition="a")
        assert _fresh(instance, settings) == set()
        _everything(instance, settings)
        assert _fresh(instance, settings) == {"child", "grandchild"}
        instance.add_dynamic_partitions("shards", ["c"])
        assert _fresh(instance, settings) == set()
        VERSIONS["c"] = "1"
        _everything(instance, settings)
        assert _fresh(instance, settings) == {"child", "grandchild"}

        # any change of configuration
        assert _fresh(instance, _settings(tmp_path, **{"train.steps": 70})) == set()

        # a failed blocking check: the asset runs again (and blocks again), not its children
        CHECK_PASSES["child"] = False
        _materialize(instance, settings, "child")
        assert "child" not in _fresh(instance, settings)
        CHECK_PASSES["child"] = True
