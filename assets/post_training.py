"""The post-training chain: sft_model -> reward_model -> dpo_model -> ppo_model ->
grpo_model, each a torchrun program (model.post.train) launched through Dagster Pipes
like base_model, tracked in MLflow, checkpointed and resumed from its last checkpoint.
Each starts from its parent's recorded checkpoint and, on success, records its own
(data/<asset>/materialized.json, stages.training.lineage)."""

from pathlib import Path

import dagster as dg

from assets.launching import TRAINING_POOL, run_program
from assets.metadata import image, rows_table
from assets.model_plan import plan_tags
from model.checkpoint.files import all_checkpoints
from resources import MlflowTracking, TorchrunLauncher, YunqueSettings
from stages.reports import post_training as post_report
from stages.reports.loss_curve import read_metrics
from stages.training.lineage import LineageError, finished_checkpoint, record_materialized
from stages.training.post_train import (
    CHAIN,
    POST_CODE_VERSION,
    PostTrainError,
    prepare_post,
)

DESCRIPTIONS = {
    "sft_model": "Supervised fine-tuning of base_model on chat conversations (built-in: math problems with worked "
                 "solutions in <think>/<answer> format); the loss covers assistant tokens only.",
    "reward_model": "A scalar head on the SFT model's trunk trained with the Bradley-Terry loss on preference pairs; "
                    "accuracy on held-out pairs in the metadata.",
    "dpo_model": "Preference optimisation of sft_model against a frozen copy of itself (DPO; ORPO and KTO as "
                 "post.dpo.loss); implicit-reward accuracy and margins on held-out pairs.",
    "ppo_model": "PPO from dpo_model: KV-cache rollouts scored by reward_model (plus the verifiable math reward), "
                 "a value head, GAE, the clipped ratio and a KL penalty to the starting model.",
    "grpo_model": "GRPO from ppo_model: G samples per prompt, group-normalised verifiable rewards (correct answer, "
                  "<think>/<answer> format), the clipped ratio and a k3 KL to the starting model.",
}
_NO_HACKING = ("the reward did not rise while the verifiable accuracy fell, and replies did not run to the "
               "length limit")
CHECKS = {
    "sft_model": (post_report.MASK_CHECK,
                  "the trained tokens of a conversation decode to exactly its assistant replies, each with its <|end|>"),
    "reward_model": (post_report.ABOVE_CHANCE,
                     "the reward model prefers the chosen reply on more than half of the held-out pairs"),
    "dpo_model": (post_report.ABOVE_CHANCE,
                  "the implicit reward prefers the chosen reply on more than half of the held-out pairs"),
    "ppo_model": (post_report.NO_HACKING, _NO_HACKING),
    "grpo_model": (post_report.NO_HACKING, _NO_HACKING),
}


# A crash (out of memory, a lost node) is worth retrying: the program resumes exactly from
# its last checkpoint, so a retry costs only the steps since. Refusals are not retried.
RETRY = dg.RetryPolicy(max_retries=2, delay=10)


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


def _post_asset(asset: str):
    stage, parent = CHAIN[asset]
    deps = [parent, *(["reward_model"] if stage == "ppo" else [])]  # PPO is scored by the reward model

    @dg.asset(name=asset, deps=deps, group_name="post_training", kinds={"pytorch", "mlflow"},
              pool=TRAINING_POOL, code_version=POST_CODE_VERSION, description=DESCRIPTIONS[asset],
              check_specs=[dg.AssetCheckSpec(CHECKS[asset][0], asset=asset)], retry_policy=RETRY)
    def _asset(context: dg.AssetExecutionContext, settings: YunqueSettings, launcher: TorchrunLauncher,
               mlflow: MlflowTracking) -> dg.MaterializeResult:
        planned = plan_tags(context, settings)  # what it starts from, for `yunque run`'s up-to-date check
        store = settings.store()
        try:
            spec = prepare_post(store, settings.data_config(), asset)
        except (PostTrainError, LineageError, ValueError) as e:
            raise dg.Failure(str(e), allow_retries=False) from e  # a missing parent stays missing
        # the run's last step, verified once before and once after training (each hashes every file)
        found = finished_checkpoint(spec)
        cached = found is not None
        reported = {}
        if cached:
            context.log.info(f"{spec.dir} holds this run's last step ({spec.steps}): nothing to train")
        else:
            newest = all_checkpoints(spec.dir)  # where the program resumes (it verifies the step itself)
            tags = {"yunque.stage": spec.config["stage"], "yunque.init_checkpoint": spec.config["init"],
                    "yunque.resumed_from_step": str(newest[-1].step if newest else 0)}
            reported = run_program(context, spec, launcher, mlflow, "model.post.train", tags,
                                   plots=lambda: post_report.plot_run(spec), store=store)
            found = finished_checkpoint(spec)
        if found is None:
            raise dg.Failure(f"{asset}: training finished but left no intact checkpoint at step {spec.steps} "
                             f"under {spec.dir}")
        runs = spec.record().get("mlflow_runs", [])
        record = record_materialized(store, asset, spec, found, context.run.run_id, runs[-1] if runs else "")
        return _result(asset, spec, found, cached, reported, record, planned)

    return _asset


sft_model = _post_asset("sft_model")
reward_model = _post_asset("reward_model")
dpo_model = _post_asset("dpo_model")
ppo_model = _post_asset("ppo_model")
grpo_model = _post_asset("grpo_model")
