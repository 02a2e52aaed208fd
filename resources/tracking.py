"""MLflow tracking: a sqlite store under $YUNQUE_HOME/mlflow or any tracking server, and its
model registry (the promoted model under an alias). A small resource of our own rather
than dagster-mlflow, whose hook leaves runs RUNNING after asset materializations.

Artifacts live beside a store this process opens itself, and where a tracking server
decides otherwise; `experiment_id` refuses an experiment left with a local path after a
switch to a server. Credentials come only from the environment, and every param, tag and
description goes through `redact` first. The experiment is tagged as a model-training
one; `ui_url` gives links to MLflow's machine-learning view. docs/deploy.md#an-mlflow-tracking-server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import dagster as dg

# The experiment tag MLflow's UI reads and writes (server/js: "mlflow.experimentKind"),
# and its value for model training (the UI's ExperimentKind.CUSTOM_MODEL_DEVELOPMENT,
# "Machine learning"; the GenAI one is "genai_development").
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"
UI_DEFAULT = "http://127.0.0.1:5000"  # `mlflow ui`'s address when the store is a file
REDACTED = "***"
# a URL's userinfo password (RFC 3986: userinfo holds no "/", "?", "#" or "@" unencoded)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*):[^/?#@\s]+@")
# environment variables whose values are secrets (AWS_SECRET_ACCESS_KEY, MLFLOW_TRACKING_PASSWORD,
# MLFLOW_TRACKING_TOKEN, PGPASSWORD, HF_TOKEN, OPENAI_API_KEY ...); not TOKENIZERS_PARALLELISM
_SECRET_NAME = re.compile(r"(^|_)(SECRET|PASSWORD|PASSWD|TOKEN|API_KEY|PRIVATE_KEY)(_|$)")
_SECRET_MIN_LEN = 8  # shorter values ("true", a test's "testing") would mangle unrelated text
# tracking URI schemes of a store the client opens itself, no server in between
# (postgresql+psycopg2 and the like count by their first part)
_LOCAL_STORES = {"", "file", "sqlite", "postgresql", "mysql", "mssql"}


class ExperimentLocationError(RuntimeError):
    """The experiment's artifacts are on a local path while the tracking URI is a server."""


def redact(value: str) -> str:
    """`value` with URL passwords (scheme://user:***@host) and the values of secret-named
    environment variables replaced by `***`: what may be written into params and tags."""
    value = _URL_PASSWORD.sub(lambda m: f"{m['head']}:{REDACTED}@", value)
    for name, secret in os.environ.items():
        if _SECRET_NAME.search(name.upper()) and len(secret) >= _SECRET_MIN_LEN and secret in value:
            value = value.replace(secret, REDACTED)
    return value


def is_server(uri: str) -> bool:
    """Does tracking URI `uri` name a server (http, https, databricks, a plugin's scheme)
    rather than a store this process opens itself (a path, file:, sqlite:, a database)?"""
    from urllib.parse import urlparse

    scheme = uri if uri in ("databricks", "databricks-uc") else urlparse(uri).scheme  # these two have no "://"
    return scheme.split("+")[0].lower() not in _LOCAL_STORES


def _is_local_path(location: str) -> bool:
    from urllib.parse import urlparse

    return urlparse(location).scheme.lower() in ("", "file")


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    flat = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat |= _flatten(v, key + ".")
        else:
            flat[key] = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
    return flat


def _redacted(tags: dict[str, str]) -> dict[str, str]:
    return {k: redact(str(v)) for k, v in tags.items()}


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

    def display_uri(self) -> str:
        """The tracking URI without its password, for logs and messages."""
        return redact(self.uri())

    def _client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.uri())

    def _artifact_location(self) -> str | None:
        """Where a new experiment's artifacts go: beside a store of our own, under the home;
        with a server, None (the server's default: the one artifact store every machine reaches)."""
        if is_server(self.uri()):
            return None
        return (Path(self.home) / "mlflow" / "artifacts").absolute().as_uri()

    def _check_location(self, exp) -> None:
        if is_server(self.uri()) and _is_local_path(exp.artifact_location):
            raise ExperimentLocationError(
                f"MLflow experiment {exp.name!r} (id {exp.experiment_id}) on {self.display_uri()} keeps its "
                f"artifacts in {exp.artifact_location}, a local path: runs logged into it would leave their "
                "artifacts (configs, records, plots, promoted models) on whichever machine logs them, not in "
                "the server's artifact store. If it was created before the switch to this server, rename it "
                f"(MLFLOW_TRACKING_URI={self.display_uri()} mlflow experiments rename --experiment-id "
                f"{exp.experiment_id} --new-name {exp.name}-local) and Yunque creates a fresh {exp.name!r} "
                "there, or give the mlflow resource another experiment name (MlflowTracking.experiment). If "
                "the server gives new experiments a local path, it has no artifact store: start it with "
                "--serve-artifacts --artifacts-destination s3://bucket/prefix (or --default-artifact-root "
                "s3://bucket/prefix).")

    def experiment_id(self) -> str:
        """The experiment's id, created if missing, tagged as model training (an existing
        experiment without a kind gets the tag; one a user set is left alone). With a
        server, an existing experiment whose artifacts are on a local path is refused
        (ExperimentLocationError, naming it and what to do)."""
        from mlflow.exceptions import MlflowException

        client = self._client()
        exp = client.get_experiment_by_name(self.experiment)
        if exp is None:
            artifacts = self._artifact_location()
            try:
                return client.create_experiment(self.experiment, artifact_location=artifacts,
                                                tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING})
            except MlflowException as e:  # another run created it in between
                if e.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                exp = client.get_experiment_by_name(self.experiment)
        self._check_location(exp)
        if EXPERIMENT_KIND_TAG not in exp.tags:
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        return exp.experiment_id

    def ui_url(self, run_id: str = "") -> str:
        """The MLflow UI page of the experiment's runs (or of one run), in the Machine
        learning view whatever the UI's switch was left on."""
        server = self.tracking_uri.startswith(("http://", "https://"))
        # a browser asks for credentials itself: none in a link that gets printed
        base = re.sub(r"//[^/?#@]*@", "//", self.tracking_uri).rstrip("/") if server else UI_DEFAULT
        page = f"/experiments/{self.experiment_id()}/runs" + (f"/{run_id}" if run_id else "")
        return f"{base}/#{page}?workflowType=machine_learning"

    def start_run(self, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        """A new RUNNING run with the params (flattened: train.lr, model.dim, ...) and tags,
        redacted (see `redact`)."""
        from mlflow.entities import Param, RunTag

        client = self._client()
        run = client.create_run(self.experiment_id(), run_name=name, tags=_redacted(tags))
        items = [Param(k, redact(v)[:6000]) for k, v in _flatten(params).items()]
        for i in range(0, len(items), 100):
            client.log_batch(run.info.run_id, params=items[i:i + 100], tags=[RunTag("mlflow.runName", name)])
        return run.info.run_id

    def env(self, run_id: str) -> dict[str, str]:
        """For the training process: rank 0 logs its per-step metrics into this run. Only
        metrics: the artifacts are logged by `finish`, in this process. Credentials (a
        server's MLFLOW_TRACKING_TOKEN or _USERNAME/_PASSWORD; AWS_* and MLFLOW_S3_ENDPOINT_URL
        when the server hands out s3:// artifact locations) are not copied here: the
        launcher passes its whole environment on, so they come from there and nowhere else."""
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
        for k, v in _redacted(tags or {}).items():
            client.set_tag(run_id, k, v)
        client.set_terminated(run_id, status)  # FINISHED, FAILED or KILLED

    def log_dir(self, run_id: str, path: Path, artifact_path: str) -> None:
        """Copy a directory into the run's artifacts under `artifact_path`."""
        self._client().log_artifacts(run_id, str(path), artifact_path)

    def register_version(self, name: str, alias: str, run_id: str, artifact_path: str, tags: dict[str, str],
                         description: str = "") -> str:
        """A new version of registered model `name` (created if missing) whose source is
        `artifact_path` of run `run_id` (a runs:/ URI: it resolves on any tracking server,
        wherever the artifacts live), with `alias` moved to it; returns the version."""
        from mlflow.exceptions import MlflowException

        client = self._client()
        try:
            client.create_registered_model(name, description="Yunque's promoted models (yunque promoted_model)")
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        mv = client.create_model_version(name, f"runs:/{run_id}/{artifact_path}", run_id=run_id,
                                         tags=_redacted(tags), description=redact(description))
        client.set_registered_model_alias(name, alias, mv.version)
        return str(mv.version)

    def aliased_version(self, name: str, alias: str) -> dict[str, Any] | None:
        """{version, source, run_id, tags} of the version `alias` points at, or None when
        the registered model or the alias does not exist."""
        from mlflow.exceptions import MlflowException

        try:
            mv = self._client().get_model_version_by_alias(name, alias)
        except MlflowException as e:
            # no such model: RESOURCE_DOES_NOT_EXIST; no such alias: INVALID_PARAMETER_VALUE
            if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None
            raise
        return {"version": str(mv.version), "source": mv.source, "run_id": mv.run_id, "tags": dict(mv.tags)}

    def download_version(self, name: str, version: str, dest: Path) -> Path:
        """The artifacts of registered model `name` version `version` (its source, a runs:/
        URI) under `dest`, downloaded once: a directory that holds them is reused."""
        from mlflow.exceptions import MlflowException

        client = self._client()
        try:
            mv = client.get_model_version(name, version)
        except MlflowException as e:
            raise LookupError(f"registered model {name!r} has no version {version} in {self.display_uri()} "
                              f"({e.error_code})") from e
        target = dest / f"v{mv.version}"
        done = target / ".downloaded"
        if done.exists():
            return Path(done.read_text())
        run_id, _, path = mv.source.removeprefix("runs:/").partition("/")
        tmp = dest / f".v{mv.version}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        got = Path(client.download_artifacts(run_id, path, str(tmp)))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)  # whole or absent: a download cut short is not served
        where = target / got.relative_to(tmp)
        done.write_text(str(where))
        return where
