"""Production topology on one machine: PostgreSQL (the Dagster instance), an S3 server
(the home and the corpus), an MLflow tracking server (artifacts on S3), a Dagster daemon
on the Postgres instance, and pretraining on two torchrun nodes, each with its own local
cache of the home. Every service is real; nothing is shared but the store and the URLs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import s3fs

from tests.support import REPO
from tests.support.factory import SMALL_TRAIN, write_two_shards
from tests.support.mlflow_server import create_bucket, mlflow_server, s3_env
from tests.yunque.pg_server import dagster_url, new_database
from yunque import env

YUNQUE = str(Path(sys.executable).with_name("yunque"))
BUCKET = "production"
HOME = f"s3://{BUCKET}/home"
SELECT = "+key:base_model"
PER_SHARD = ("raw_documents", "clean_documents", "filtered_documents", "minhash_signatures", "deduped_documents",
             "token_shards")
OVERRIDES = json.dumps({"tokenizer.vocab_size": 512, **SMALL_TRAIN})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(url: str, sql: str) -> list[tuple]:
    import psycopg2

    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


@pytest.mark.timeout(1500)
def test_production_topology_on_one_machine(postgres_url, s3_server, tmp_path):
    pg = new_database(postgres_url, "production")
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, key="testing", secret="testing",
                           skip_instance_cache=True)
    fs.mkdir(BUCKET)
    write_two_shards(tmp_path / "corpus")
    fs.put(str(tmp_path / "corpus") + "/", f"{BUCKET}/corpus/", recursive=True)
    create_bucket(s3_server)  # the MLflow server's artifact bucket

    base = {k: v for k, v in os.environ.items() if not k.startswith(("YUNQUE_", "DAGSTER_", "MLFLOW_"))}
    base |= {**s3_env(s3_server), "YUNQUE_S3_ENDPOINT": s3_server, "YUNQUE_HOME": HOME,
             env.POSTGRES_URL: dagster_url(pg), "YUNQUE_DAEMON_INTERVAL": "2", "YUNQUE_SENSOR_INTERVAL": "5"}
    with mlflow_server(tmp_path / "mlflow", "s3://yunque-mlflow/production", s3_env(s3_server)) as mlflow_url:
        base["MLFLOW_TRACKING_URI"] = mlflow_url
        rdzv = f"127.0.0.1:{_free_port()}"
        node0 = {**base, "YUNQUE_CACHE": str(tmp_path / "node0"), "YUNQUE_NNODES": "2", "YUNQUE_RDZV_ENDPOINT": rdzv}
        node1 = {**base, "YUNQUE_CACHE": str(tmp_path / "node1")}
        run = [YUNQUE, "--home", HOME, "--s3-endpoint", s3_server, "run", "--corpus", f"s3://{BUCKET}/corpus",
               "--select", SELECT, "--overrides", OVERRIDES]
        with open(tmp_path / "node1.log", "w") as log:
            joiner = subprocess.Popen([YUNQUE, "--home", HOME, "node", "--node-rank", "1", "--wait", "1200"],
                                      cwd=REPO, env=node1, stdout=log, stderr=subprocess.STDOUT)
            try:
                first = subprocess.run(run, check=False, cwd=REPO, env=node0, capture_output=True, text=True, timeout=1300)
                node_status = joiner.wait(timeout=120)
            finally:
                if joiner.poll() is None:
                    joiner.kill()
        node_log = (tmp_path / "node1.log").read_text()
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:] + node_log[-3000:]
        assert node_status == 0, node_log[-3000:]
        assert "node 1 of 2: joining base_model" in node_log

        # the outputs are in the bucket: a committed version per shard and asset, the run's checkpoints
        for asset in PER_SHARD:
            for shard in ("manuales", "foro"):
                m = json.loads(fs.cat(f"{BUCKET}/home/data/{asset}/{shard}/_manifest.json"))
                assert fs.exists(f"{BUCKET}/home/data/{asset}/{shard}/{m['version']}"), (asset, shard)
        for asset in ("dedup_index", "tokenizer"):
            assert json.loads(fs.cat(f"{BUCKET}/home/data/{asset}/_manifest.json"))["version"]
        record = json.loads(fs.cat(f"{BUCKET}/home/data/base_model/materialized.json"))
        step = Path(record["checkpoint"]).name
        assert fs.exists(f"{BUCKET}/home/data/base_model/{step}/checksums.json")
        assert record["step"] == SMALL_TRAIN["train.steps"]
        # node 1 trained from its own cache of the home, filled from the store
        assert (tmp_path / "node1" / "data" / "token_shards").is_dir()
        assert not (tmp_path / "node1" / "data" / "raw_documents").exists()

        # the runs are in Postgres
        runs = _query(pg, "SELECT status, count(*) FROM runs GROUP BY status")
        assert [s for s, _ in runs] == ["SUCCESS"], runs
        assert _query(pg, "SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION' "
                          "AND asset_key = '[\"base_model\"]'") == [(1,)]

        # the MLflow run and its artifacts are on the server (and the artifacts in its bucket)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(mlflow_url)
        run_id = record["mlflow_run_id"]
        mrun = client.get_run(run_id)
        assert mrun.info.status == "FINISHED" and "loss" in mrun.data.metrics
        names = {a.path for a in client.list_artifacts(run_id)}
        assert {"run.json", "metrics.jsonl"} <= names
        assert any(p.endswith("/run.json") for p in fs.find("yunque-mlflow/production"))
        assert not (tmp_path / "node0" / "mlflow").exists()  # nothing tracked locally

        # a second invocation, on a fresh cache (another machine), finds every output up to
        # date in the bucket and the instance (stages.data.plan, assets.training.plan): no run
        runs_before = _query(pg, "SELECT count(*) FROM runs")
        again_env = {**node0, "YUNQUE_CACHE": str(tmp_path / "node2")}
        again = subprocess.run(run, check=False, cwd=REPO, env=again_env, capture_output=True, text=True, timeout=900)
        assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
        assert "nothing changed: no run started" in again.stdout, again.stdout[-4000:]
        assert _query(pg, "SELECT count(*) FROM runs") == runs_before
        assert len(client.search_runs([mrun.info.experiment_id])) == 1  # no new training run
