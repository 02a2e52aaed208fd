"""The code location: `dagster dev -w workspace.yaml` loads `defs` from here."""

import os

import dagster as dg

from assets.data import contamination, dedup, dedup_checks, ingest, quality, token_checks, tokens
from assets.evaluation import export, promotion, report
from assets.feedback import human_preferences
from assets.operations.automation import train_job, train_on_new_data
from assets.operations.feedback import align_job, feedback_sensor
from assets.operations.jobs import dedup_job, shard_job
from assets.operations.sensors import shard_sensor
from assets.training import post_training, pretrain
from resources import CorpusStorage, MlflowTracking, TorchrunLauncher, YunqueSettings
from resources.corpus import default_corpus
from resources.telemetry import apply as telemetry_off
from stages.store import home as home_settings
from stages.store.location import home as local_home
from stages.store.location import home_url

telemetry_off()  # the code location is an entry point too (`dagster dev`)

ASSETS = dg.load_assets_from_modules([ingest, dedup, quality, tokens, contamination, pretrain, human_preferences,
                                      post_training, report, export, promotion])
CHECKS = dg.load_asset_checks_from_modules([dedup_checks, token_checks, contamination, promotion])


def training_launcher() -> dg.ConfigurableResource:
    """torchrun on this machine (node 0 of YUNQUE_NNODES), or, on a cluster
    (YUNQUE_TRAINING_LAUNCHER=k8s, deploy/k8s), training pods (needs the `k8s` extra,
    imported only then)."""
    if os.environ.get("YUNQUE_TRAINING_LAUNCHER") == "k8s":
        from resources import KubernetesTrainingLauncher

        return KubernetesTrainingLauncher.from_env()
    return TorchrunLauncher(nproc_per_node=int(os.environ.get("YUNQUE_NPROC_PER_NODE", "1")),
                            nnodes=int(os.environ.get("YUNQUE_NNODES", "1")),
                            node_rank=int(os.environ.get("YUNQUE_NODE_RANK", "0")),
                            rdzv_endpoint=os.environ.get("YUNQUE_RDZV_ENDPOINT", ""),
                            timeout_s=int(os.environ.get("YUNQUE_TRAIN_TIMEOUT", "0")))


def build_resources(home: str | None = None, corpus: str | None = None, preset: str | None = None,
                    overrides: dict | str | None = None, endpoint_url: str | None = None) -> dict:
    """Resources from explicit values, else YUNQUE_* environment variables, else what the
    home remembers (`stages.store.home`: written by `yunque run`), else the defaults."""
    home = home or home_url()  # a directory or an object store URL (stages.store.remote)
    saved = home_settings.read(home)
    corpus = corpus or os.environ.get("YUNQUE_CORPUS") or saved.corpus or default_corpus()
    endpoint_url = endpoint_url or os.environ.get("YUNQUE_S3_ENDPOINT") or saved.s3_endpoint or None
    preset = preset or os.environ.get("YUNQUE_PRESET") or saved.preset
    if overrides is None:
        overrides = os.environ.get("YUNQUE_OVERRIDES") or saved.overrides
    return {
        "corpus": CorpusStorage(uri=corpus, endpoint_url=endpoint_url),
        "settings": YunqueSettings.build(home, preset, overrides),
        "launcher": training_launcher(),
        # the embedded MLflow store is a local sqlite file: under the home, or its local cache
        # a tracking URI may carry a password: an EnvVar, read by each run, never shown as a value
        "mlflow": MlflowTracking(home=str(local_home() if "://" in home else home),
                                 tracking_uri=dg.EnvVar("MLFLOW_TRACKING_URI") if os.environ.get("MLFLOW_TRACKING_URI")
                                 else ""),
    }


# On by default: when the shard sensor's runs land new signatures, dedup_index, then
# deduped_documents, the tokenizer (once) and token_shards follow through their automation conditions.
automation_sensor = dg.AutomationConditionSensorDefinition(
    "data_automation", target=dg.AssetSelection.all(), default_status=dg.DefaultSensorStatus.RUNNING,
    description="Carries new or changed shards through the data half: when signatures change, dedup_index is "
                "rebuilt, then deduped_documents and token_shards follow; the tokenizer is trained once, when it "
                "is missing. Training is not automated here: see the train_on_new_data schedule.",
    minimum_interval_seconds=int(os.environ.get("YUNQUE_AUTOMATION_INTERVAL", "30")),
)

def definitions_with(resources: dict, timing: home_settings.Timing | None = None) -> dg.Definitions:
    """The graph with these resources (`yunque run` builds its own from its command line),
    its sensor and schedule on `timing` (default: the defaults)."""
    timing = timing or home_settings.Timing(home_settings.SENSOR_INTERVAL_S, home_settings.TRAINING_CRON)
    return dg.Definitions(
        # Steps run in the run's own process: a data step is cheap next to a process start and a
        # second import of this code location, and training steps start torchrun themselves.
        executor=dg.in_process_executor,
        assets=ASSETS,
        asset_checks=CHECKS,
        jobs=[shard_job, dedup_job, train_job, align_job],
        schedules=[train_on_new_data(timing.training_cron)],
        sensors=[shard_sensor(timing.sensor_interval_s), automation_sensor, feedback_sensor()],
        resources=resources,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """The code location. Its resources come from the home's settings, read when Dagster
    loads the location (each process that does: the webserver, the daemon, a run worker),
    not when this module is imported: importing it reads no yunque.json, local or on S3."""
    return definitions_with(build_resources(), home_settings.timing(home_url()))
