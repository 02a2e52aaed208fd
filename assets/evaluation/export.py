"""exported_model: the chain's last checkpoint as a Hugging Face directory and GGUF files,
each loaded back and checked against our own logits."""

import dagster as dg

from assets.evaluation.report import CHECKPOINT_ASSETS, RATINGS
from assets.training.plan import plan_tags
from resources import YunqueSettings
from stages.asset_names import EXPORTED_MODEL
from stages.evaluation.evaluate import export_latest
from stages.training.lineage import LineageError, chain

TRANSFORMERS_MATCH = "transformers_logits_match"
GGUF_MATCH = "gguf_logits_match"


@dg.asset(deps=[*CHECKPOINT_ASSETS, RATINGS], group_name="evaluation", kinds={"pytorch", "huggingface"},
          check_specs=[dg.AssetCheckSpec(TRANSFORMERS_MATCH, asset=EXPORTED_MODEL),
                       dg.AssetCheckSpec(GGUF_MATCH, asset=EXPORTED_MODEL)])
def exported_model(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    """The last checkpoint of the chain as a Hugging Face directory (LlamaForCausalLM,
    safetensors, tokenizer with chat template) that transformers and vLLM load, plus GGUF
    files (f16, q8_0, q4_0) for llama.cpp; checked by loading them back in transformers."""
    planned = plan_tags(context, settings)
    store, cfg = settings.store(), settings.data_config()
    try:
        record = export_latest(store, cfg)
    except (FileNotFoundError, LineageError) as e:
        raise dg.Failure(str(e)) from e
    results = record["checks"]
    context.log.info(f"{record['stage']} step {record['step']} in {record['dir']}"
                     f"{' (unchanged, not re-exported)' if record['cached'] else ''}; loaded back in transformers")
    checks = [dg.AssetCheckResult(
        check_name=TRANSFORMERS_MATCH, passed=results["hf"]["passed"], metadata=results["hf"],
        description="transformers' LlamaForCausalLM on the export gives our logits for the weights it stores "
                    "(max abs diff <= 1e-4 in fp32) and our greedy tokens")]
    gguf = {k: v for k, v in results.items() if k != "hf"}
    checks.append(dg.AssetCheckResult(
        check_name=GGUF_MATCH, passed=all(v["passed"] for v in gguf.values()),
        severity=dg.AssetCheckSeverity.WARN, metadata={"files": dg.MetadataValue.json(gguf)},
        description="each GGUF file, loaded by transformers (gguf_file=), gives our logits for the weights as "
                    "stored (max abs diff <= 1e-4) and stays within its quantization's tolerance of the "
                    "full-precision model" if gguf else "no GGUF files configured (export.gguf is empty)"))
    md = {"dir": dg.MetadataValue.path(record["dir"]), "stage": record["stage"], "step": record["step"],
          "checkpoint": dg.MetadataValue.path(record["checkpoint"]), "architecture": record["architecture"],
          "files": dg.MetadataValue.json(record["files"]),
          "max_abs_logit_diff": results["hf"]["max_abs_diff"], "cached": record["cached"],
          "weights_sha256": record["source"]["weights_sha256"],
          "lineage": dg.MetadataValue.json({r["asset"]: r["weights_sha256"] for r in chain(record["lineage"])}),
          "load": dg.MetadataValue.md(f"```python\nAutoModelForCausalLM.from_pretrained({record['dir']!r})\n```")}
    return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(record["export_key"][:20]),
                                check_results=checks, tags=planned)
