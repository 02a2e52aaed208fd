"""The post-training chain: sft_model -> reward_model -> dpo_model -> ppo_model ->
grpo_model, each a torchrun program (model.post.train) launched through Dagster Pipes
like base_model, tracked in MLflow, checkpointed and resumed from its last checkpoint.
Each starts from its parent's recorded checkpoint and, on success, records its own
(data/<asset>/materialized.json, stages.training.lineage)."""

from collections.abc import Callable
from pathlib import Path

import dagster as dg

from assets.metadata import image, rows_table
from assets.training.factory import training_asset
from model.checkpoint.files import Checkpoint, all_checkpoints
from resources import CorpusStorage, MlflowTracking, YunqueSettings
from stages.asset_names import CHAIN, HUMAN_PREFERENCES, REWARD_MODEL
from stages.reports import post_training as post_report
from stages.reports.loss_curve import read_metrics
from stages.store.outputs import DataStore
from stages.training.lineage import LineageError, finished_checkpoint
from stages.training.post_train import POST_CODE_VERSION, PostTrainError, prepare_post
from stages.training.runs import RunSpec

DESCRIPTIONS = {
    "sft_model": "Supervised fine-tuning of base_model on chat conversations (built-in: math problems with worked "
                 "solutions in `<think>`/`<answer>` format); the loss covers assistant tokens only.",
    "reward_model": "A scalar head on the SFT model's trunk trained with the Bradley-Terry loss on preference pairs; "
                    "accuracy on held-out pairs in the metadata.",
    "dpo_model": "Preference optimisation of sft_model against a frozen copy of itself (DPO; ORPO and KTO as "
                 "post.dpo.loss); implicit-reward accuracy and margins on held-out pairs.",
    "ppo_model": "PPO from dpo_model: KV-cache rollouts scored by reward_model (plus the verifiable math reward), "
                 "a value head, GAE, the clipped ratio and a KL penalty to the starting model.",
    "grpo_model": "GRPO from ppo_model: G samples per prompt, group-normalised verifiable rewards (correct answer, "
                  "`<think>`/`<answer>` format), the clipped ratio and a k3 KL to the starting model.",
}
_NO_HACKING = ("the reward did not rise while the verifiable accuracy fell, and replies did not run to the "
               "length limit")
CHECKS = {
    "sft_model": (post_report.MASK_CHECK,
                  "the trained tokens of a conversation decode to exactly its assistant replies, each with its `<|end|>`"),
    "reward_model": (post_report.ABOVE_CHANCE,
                     "the reward model prefers the chosen reply on more than half of the held-out pairs"),
    "dpo_model": (post_report.ABOVE_CHANCE,
                  "the implicit reward prefers the chosen reply on more than half of the held-out pairs"),
    "ppo_model": (post_report.NO_HACKING, _NO_HACKING),
    "grpo_model": (post_report.NO_HACKING, _NO_HACKING),
}


def _result(asset: str, spec, checkpoint, cached: bool, reported: dict, record: dict,
            planned: dict[str, str]) -> dg.MaterializeResult:
    records = read_metrics(spec.dir)
    summary = post_report.summarize(asset, spec, records, checkpoint.path)
    parent = record["parent"]
    md = {**{k: v for k, v in reported.items() if k != "checkpoint"},
          "checkpoint": dg.MetadataValue.path(summary["checkpoint"]), "step": summary["step"], "cached": cached,
          "stage": spec.config["stage"],
          "run_key": spec.key, "mlflow_run_id": record["mlflow_run_id"],
          "parent": f"{parent['asset']} {parent['weights_sha256'][:12]} (dagster run {parent['dagster_run_id']})",
          "materialized": dg.MetadataValue.path(str(spec.dir / "materialized.json")),
          "lineage": dg.MetadataValue.json({k: v for k, v in spec.lineage.items() if k != "parent"}),
          "config": dg.MetadataValue.json(spec.config["train"])}
    md |= summary["final"]
    if summary["plan"]:
        md["plan"] = dg.MetadataValue.md("```\n" + summary["plan"] + "\n```")
    if summary["curve"]:
        md["curve"] = rows_table(summary["curve"])
    if summary["png"]:
        md["curve_png"] = image(Path(summary["png"]), f"{asset} training curve")
    name, description = CHECKS[asset]
    verdict = summary["check"]
    check = dg.AssetCheckResult(check_name=name, passed=verdict["passed"], severity=dg.AssetCheckSeverity.WARN,
                                description=description, metadata={"detail": verdict["detail"]})
    return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(summary["weights"][:20]),
                                check_results=[check], tags=planned)


class PostTraining:
    """A post-training stage's way through the training skeleton (assets.training.factory)."""

    module = "model.post.train"

    def __init__(self, asset: str):
        self.asset = asset

    def prepare(self, context: dg.AssetExecutionContext, settings: YunqueSettings, store: DataStore,
                corpus: CorpusStorage) -> RunSpec:
        try:
            return prepare_post(store, settings.data_config(), self.asset)
        except (PostTrainError, LineageError, ValueError) as e:
            raise dg.Failure(str(e), allow_retries=False) from e  # a missing parent stays missing

    def finished(self, spec: RunSpec) -> Checkpoint | None:
        # the run's last step, verified once before and once after training (each hashes every file)
        return finished_checkpoint(spec)

    def consumed(self, end: Checkpoint) -> Checkpoint:
        return end

    def nothing_to_do(self, spec: RunSpec, end: Checkpoint) -> str:
        return f"{spec.dir} holds this run's last step ({spec.steps}): nothing to train"

    def starting(self, spec: RunSpec) -> None:
        return None

    def tags(self, spec: RunSpec) -> dict[str, str]:
        newest = all_checkpoints(spec.dir)  # where the program resumes (it verifies the step itself)
        return {"yunque.stage": spec.config["stage"], "yunque.init_checkpoint": spec.config["init"],
                "yunque.resumed_from_step": str(newest[-1].step if newest else 0)}

    def plots(self, spec: RunSpec) -> Callable[[], list[Path]]:
        return lambda: post_report.plot_run(spec)

    def after_training(self, mlflow: MlflowTracking, spec: RunSpec, end: Checkpoint) -> None:
        pass

    def result(self, spec: RunSpec, end: Checkpoint, cached: bool, reported: dict, record: dict,
               planned: dict[str, str]) -> dg.MaterializeResult:
        return _result(self.asset, spec, end, cached, reported, record, planned)


def _post_asset(asset: str) -> dg.AssetsDefinition:
    stage, parent = CHAIN[asset]
    # the chat page's ratings: SFT, the reward model and DPO read them; PPO and GRPO depend on
    # them too, so that a new ratings version marks them stale in the UI at once (Dagster
    # marks only an asset's direct children), as it does eval_report, the export and promotion
    deps = [parent, *([REWARD_MODEL] if stage == "ppo" else []), HUMAN_PREFERENCES]
    return training_asset(PostTraining(asset), deps=deps, group_name="post_training", code_version=POST_CODE_VERSION,
                          description=DESCRIPTIONS[asset], check=CHECKS[asset][0])


sft_model = _post_asset("sft_model")
reward_model = _post_asset("reward_model")
dpo_model = _post_asset("dpo_model")
ppo_model = _post_asset("ppo_model")
grpo_model = _post_asset("grpo_model")
