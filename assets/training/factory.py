"""One factory for every training asset (base_model and the post-training chain): the
skeleton they share, with what differs between them in a `Training` object.

    prepare the run (a refusal is one line, never retried) -> finished already? ->
    else run the program under torchrun (assets.training.launching.run_program) and find where it
    ended -> record the consumed checkpoint (stages.training.lineage) -> the
    materialization's metadata, checks and data version."""

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import dagster as dg

from assets.training.launching import TRAINING_POOL, run_program
from assets.training.plan import plan_tags
from model.checkpoint.files import Checkpoint
from resources import CorpusStorage, MlflowTracking, TorchrunLauncher, YunqueSettings
from stages.store.outputs import DataStore
from stages.training.lineage import record_materialized

# A crash (out of memory, a lost node) is worth retrying: exact resume continues from the
# last checkpoint, so a retry costs only the steps since. Refusals are not retried.
RETRY = dg.RetryPolicy(max_retries=2, delay=10)


class Training(Protocol):
    """What one training asset does its own way. `End` is whatever `finished` returns:
    base_model's RunEnd (last and best checkpoints, early stop), a post-training stage's
    last checkpoint."""

    asset: str
    module: str  # the program torchrun starts

    def prepare(self, context: dg.AssetExecutionContext, settings: YunqueSettings, store: DataStore,
                corpus: CorpusStorage) -> Any: ...

    def finished(self, spec: Any) -> Any | None: ...

    def consumed(self, end: Any) -> Checkpoint: ...

    def nothing_to_do(self, spec: Any, end: Any) -> str: ...

    def starting(self, spec: Any) -> str | None: ...

    def tags(self, spec: Any) -> dict[str, str]: ...

    def plots(self, spec: Any) -> Callable[[], list[Path]] | None: ...

    def after_training(self, mlflow: MlflowTracking, spec: Any, end: Any) -> None: ...

    def result(self, spec: Any, end: Any, cached: bool, reported: dict, record: dict,
               planned: dict[str, str]) -> dg.MaterializeResult: ...


def training_asset(training: Training, *, deps: list, group_name: str, code_version: str, description: str,
                   check: str) -> dg.AssetsDefinition:
    @dg.asset(name=training.asset, deps=deps, group_name=group_name, kinds={"pytorch", "mlflow"},
              pool=TRAINING_POOL, code_version=code_version, description=description,
              check_specs=[dg.AssetCheckSpec(check, asset=training.asset)], retry_policy=RETRY)
    def _asset(context: dg.AssetExecutionContext, settings: YunqueSettings, launcher: TorchrunLauncher,
               mlflow: MlflowTracking, corpus: CorpusStorage) -> dg.MaterializeResult:
        planned = plan_tags(context, settings)  # what it starts from, for `yunque run`'s up-to-date check
        store = settings.store()
        spec = training.prepare(context, settings, store, corpus)
        end = training.finished(spec)
        cached = end is not None
        reported: dict = {}
        if cached:
            context.log.info(training.nothing_to_do(spec, end))
        else:
            if line := training.starting(spec):
                context.log.info(line)
            reported = run_program(context, spec, launcher, mlflow, training.module, training.tags(spec),
                                   plots=training.plots(spec), store=store)
            end = training.finished(spec)
            if end is None:
                raise dg.Failure(f"{training.asset}: training finished but left no intact checkpoint at step "
                                 f"{spec.steps} under {spec.dir}")
            training.after_training(mlflow, spec, end)
        runs = spec.record().get("mlflow_runs", [])
        record = record_materialized(store, training.asset, spec, training.consumed(end), context.run.run_id,
                                     runs[-1] if runs else "")
        return training.result(spec, end, cached, reported, record, planned)

    return _asset
