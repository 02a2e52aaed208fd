"""MlflowTracking against a real `mlflow server` (sqlite store, artifacts proxied to the
moto S3 server, see tests/support/mlflow_server.py): the artifacts land in the bucket, never on
the local disk; the run reads back through the server; a training process given only
`MlflowTracking.env` logs into the same run; the registry alias works; an experiment left
with a local artifact path is refused; no secret reaches params or tags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import mlflow
import pytest
from mlflow.tracking import MlflowClient

from resources.telemetry import TELEMETRY_OFF
from resources.tracking import REDACTED, ExperimentLocationError, MlflowTracking, is_server, redact
from tests.support import REPO
from tests.support.mlflow_server import (
    BUCKET,
    PREFIX,
    create_bucket,
    mlflow_server,
    s3_env,
)


def _keys(s3_server: str, prefix: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=s3_server, aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"].removeprefix(prefix) for page in pages for o in page.get("Contents", []))


def _tracking(tmp_path: Path, url: str, experiment: str) -> MlflowTracking:
    return MlflowTracking(home=str(tmp_path / "home"), tracking_uri=url, experiment=experiment)


def test_is_server_and_redact():
    assert is_server("http://127.0.0.1:5000") and is_server("https://mlflow.example") and is_server("databricks")
    for local in ("sqlite:////h/mlflow.db", "postgresql://u:p@h/db", "postgresql+psycopg2://h/db", "/h/mlruns",
                  "file:///h/mlruns", "mlruns"):
        assert not is_server(local), local
    assert redact("postgresql://u:secret@h:5432/db") == f"postgresql://u:{REDACTED}@h:5432/db"
    assert redact("postgresql+psycopg2://u:p%40ss@h/db?x=1") == f"postgresql+psycopg2://u:{REDACTED}@h/db?x=1"
    assert redact("a https://k:s@one/x and s3://id:key@two/y") == f"a https://k:{REDACTED}@one/x and s3://id:{REDACTED}@two/y"
    for kept in ("s3://bucket/prefix/data", "http://host:8080/path", "postgresql://u@h/db", "user:pw@host",
                 "/a/b:c@d"):
        assert redact(kept) == kept


def test_runs_log_through_the_server_and_artifacts_land_in_the_bucket(mlflow_server_url, s3_server, tmp_path):
    tracking = _tracking(tmp_path, mlflow_server_url, "server-artifacts")
    run_id = tracking.start_run("base_model-abc", {"train": {"lr": 0.01, "steps": 3}, "model": {"dim": 8}},
                                {"dagster.asset_key": "base_model"})
    tracking.log_metrics(run_id, {"loss": 2.5}, step=1)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"train": {"lr": 0.01}}))
    export = tmp_path / "export"
    export.mkdir()
    (export / "model.safetensors").write_bytes(b"\0" * 32)
    tracking.log_dir(run_id, export, "model")
    tracking.finish(run_id, "FINISHED", artifacts=[config], metrics={"val_loss": 2.0})

    client = MlflowClient(mlflow_server_url)
    exp = client.get_experiment_by_name("server-artifacts")
    # the server's default (proxied), not a path on this machine
    assert exp.artifact_location.startswith("mlflow-artifacts:")
    assert not (tmp_path / "home" / "mlflow").exists()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.experiment_id == exp.experiment_id
    assert run.data.params == {"train.lr": "0.01", "train.steps": "3", "model.dim": "8"}
    assert run.data.metrics == {"loss": 2.5, "final_val_loss": 2.0}
    assert run.data.tags["dagster.asset_key"] == "base_model"
    assert _keys(s3_server, f"{PREFIX}/{exp.experiment_id}/{run_id}/artifacts/") == [
        "config.json", "model/model.safetensors"]
    assert tracking.ui_url(run_id).startswith(f"{mlflow_server_url}/#/experiments/{exp.experiment_id}/runs/{run_id}")


def test_a_training_process_logs_into_the_run_with_the_env_it_is_given(mlflow_server_url, tmp_path):
    """The training program's MlflowSink in a real process whose environment is only what
    run_program passes (TELEMETRY_OFF + MlflowTracking.env) and PATH: no AWS or S3 settings."""
    tracking = _tracking(tmp_path, mlflow_server_url, "server-training")
    run_id = tracking.start_run("base_model-def", {"train": {"steps": 2}}, {})
    env = tracking.env(run_id)
    assert env == {"MLFLOW_TRACKING_URI": mlflow_server_url, "MLFLOW_RUN_ID": run_id}
    program = ("from model.launch.sinks import MlflowSink\n"
               "sink = MlflowSink(every=1)\n"
               "for step in (1, 2):\n"
               "    sink.step({'step': step, 'time': 1.0 * step, 'loss': 3.0 - step, 'lr': 0.1})\n"
               "sink.flush()\n")
    done = subprocess.run([sys.executable, "-c", program], check=False, cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **TELEMETRY_OFF, **env})
    assert done.returncode == 0, done.stderr
    tracking.finish(run_id, "FINISHED")
    history = MlflowClient(mlflow_server_url).get_metric_history(run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(1, 2.0), (2, 1.0)]


def test_the_registry_alias_moves_on_the_server(mlflow_server_url, s3_server, tmp_path, monkeypatch):
    """What promoted_model does (assets/evaluation/promotion.py): a promotion run with the export in its
    artifacts, register_version, aliased_version; and models:/name@alias resolves through the server."""
    tracking = _tracking(tmp_path, mlflow_server_url, "server-registry")
    name = "yunque-server-test"
    assert tracking.aliased_version(name, "champion") is None
    runs = []
    for n in range(2):
        export = tmp_path / f"export{n}"
        export.mkdir()
        (export / "model.safetensors").write_bytes(bytes([n + 1]) * 64)
        run_id = tracking.start_run("promotion", {"promotion": {"alias": "champion"}}, {"yunque.stage": "sft"})
        tracking.log_dir(run_id, export, "model")
        version = tracking.register_version(name, "champion", run_id, "model", {"yunque.n": str(n)},
                                            description="no regression")
        tracking.finish(run_id, "FINISHED", tags={"yunque.model_version": version})
        runs.append((run_id, version))
    assert [v for _, v in runs] == ["1", "2"]
    current = tracking.aliased_version(name, "champion")
    assert current["version"] == "2" and current["run_id"] == runs[1][0] and current["tags"]["yunque.n"] == "1"
    assert tracking.aliased_version(name, "other") is None
    exp_id = tracking.experiment_id()
    assert _keys(s3_server, f"{PREFIX}/{exp_id}/{runs[1][0]}/artifacts/") == ["model/model.safetensors"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server_url)
    got = mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}@champion", dst_path=str(tmp_path / "dl"))
    assert (Path(got) / "model.safetensors").read_bytes() == bytes([2]) * 64


def test_an_experiment_with_local_artifacts_is_refused_on_a_server(mlflow_server_url, tmp_path):
    """Made by an embedded store (or an older Yunque) and then found on a server: refused
    with its name and the way out, before any run is created in it."""
    client = MlflowClient(mlflow_server_url)
    exp_id = client.create_experiment("server-local-leftover", artifact_location=(tmp_path / "arts").as_uri())
    tracking = _tracking(tmp_path, mlflow_server_url, "server-local-leftover")
    with pytest.raises(ExperimentLocationError, match=r"'server-local-leftover' \(id \d+\).*a local path") as e:
        tracking.start_run("x", {}, {})
    assert f"mlflow experiments rename --experiment-id {exp_id}" in str(e.value)
    assert client.search_runs([exp_id]) == []


def test_no_secret_reaches_params_or_tags(mlflow_server_url, tmp_path, monkeypatch):
    env_secret = "hunter2-from-the-environment"
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", env_secret)  # not read by the server: no auth app
    tracking = _tracking(tmp_path, mlflow_server_url, "server-secrets")
    config = {"data": {"db": "postgresql://u:secret@h/db", "shards": "s3://bucket/prefix/shard-0"},
              "train": {"init": f"https://u:{env_secret}@hub.example/x", "lists": ["s3://k:secret@b/o"]}}
    run_id = tracking.start_run("base_model-s", config, {"yunque.source": "postgresql://u:secret@h/db"})
    tracking.finish(run_id, "FINISHED", tags={"yunque.where": f"token {env_secret}"})

    run = MlflowClient(mlflow_server_url).get_run(run_id)
    written = {**run.data.params, **run.data.tags}
    assert not [k for k, v in written.items() if "secret" in v or env_secret in v]
    assert run.data.params["data.db"] == f"postgresql://u:{REDACTED}@h/db"
    assert run.data.params["data.shards"] == "s3://bucket/prefix/shard-0"  # a plain URL is kept as it is
    assert run.data.params["train.init"] == f"https://u:{REDACTED}@hub.example/x"
    assert run.data.tags["yunque.where"] == f"token {REDACTED}"


def test_direct_s3_artifacts_take_credentials_from_the_environment_only(s3_server, tmp_path, monkeypatch):
    """The other topology: a server without --serve-artifacts hands out s3:// locations and
    the client writes there itself, with MLFLOW_S3_ENDPOINT_URL and AWS_* from its own
    environment; none of it is written into the run."""
    create_bucket(s3_server)
    secret = "a-long-aws-secret-access-key-for-this-test"
    with mlflow_server(tmp_path / "direct", f"s3://{BUCKET}/direct", s3_env(s3_server), serve_artifacts=False) as url:
        for k, v in {**s3_env(s3_server), "AWS_SECRET_ACCESS_KEY": secret}.items():
            monkeypatch.setenv(k, v)  # moto takes any key: this client's own credentials
        tracking = _tracking(tmp_path, url, "server-direct")
        run_id = tracking.start_run("base_model-d", {"train": {"steps": 1}, "out": f"s3://{BUCKET}/home/x"}, {})
        (tmp_path / "run.json").write_text("{}")
        tracking.finish(run_id, "FINISHED", artifacts=[tmp_path / "run.json"], metrics={"val_loss": 1.0})
        exp_id = tracking.experiment_id()
        assert MlflowClient(url).get_experiment(exp_id).artifact_location == f"s3://{BUCKET}/direct/{exp_id}"
        run = MlflowClient(url).get_run(run_id)
    assert _keys(s3_server, f"direct/{exp_id}/{run_id}/artifacts/") == ["run.json"]
    written = " ".join([*run.data.params.values(), *run.data.tags.values()])
    assert secret not in written and s3_server not in written
