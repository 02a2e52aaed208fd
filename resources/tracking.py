"""MLflow tracking: a sqlite store under $YUNQUE_HOME/mlflow (`mlflow ui
--backend-store-uri sqlite:///$YUNQUE_HOME/mlflow/mlflow.db` reads it) or any tracking
server. A small resource of our own rather than dagster-mlflow, whose hook leaves runs
RUNNING after asset materializations."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import dagster as dg


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    flat = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat |= _flatten(v, key + ".")
        else:
            flat[key] = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
    return flat


class MlflowTracking(dg.ConfigurableResource):
    home: str
    tracking_uri: str = ""  # default: sqlite under home/mlflow
    experiment: str = "yunque"

    def uri(self) -> str:
        if self.tracking_uri:
            return self.tracking_uri
        root = Path(self.home) / "mlflow"
        root.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{root / 'mlflow.db'}"

    def _client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.uri())

    def start_run(self, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        """A new RUNNING run with the params (flattened: train.lr, model.dim, ...) and tags."""
        from mlflow.entities import Param, RunTag

        client = self._client()
        exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            artifacts = (Path(self.home) / "mlflow" / "artifacts").absolute().as_uri()
            exp_id = client.create_experiment(self.experiment, artifact_location=artifacts)
        else:
            exp_id = exp.experiment_id
        run = client.create_run(exp_id, run_name=name, tags=tags)
        items = [Param(k, v[:6000]) for k, v in _flatten(params).items()]
        for i in range(0, len(items), 100):
            client.log_batch(run.info.run_id, params=items[i:i + 100], tags=[RunTag("mlflow.runName", name)])
        return run.info.run_id

    def env(self, run_id: str) -> dict[str, str]:
        """For the training process: rank 0 logs its per-step metrics into this run."""
        return {"MLFLOW_TRACKING_URI": self.uri(), "MLFLOW_RUN_ID": run_id}

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        for i in range(0, len(items), 500):
            self._client().log_batch(run_id, metrics=items[i:i + 500])

    def finish(self, run_id: str, status: str, artifacts: list[Path] = (), metrics: dict[str, float] | None = None,
               tags: dict[str, str] | None = None) -> None:
        client = self._client()
        for path in artifacts:
            if Path(path).exists():
                client.log_artifact(run_id, str(path))
        for k, v in (metrics or {}).items():
            client.log_metric(run_id, f"final_{k}", float(v))
        for k, v in (tags or {}).items():
            client.set_tag(run_id, k, v)
        client.set_terminated(run_id, status)  # FINISHED, FAILED or KILLED
