"""The cluster profile (deploy/k8s) and the Kubernetes training launcher, checked without a
cluster: the manifests that would be submitted, built through the kubernetes client's
models; the instance YAML through Dagster's own schema; the run launcher's Job for a
per-shard run through dagster-k8s's own code, with the API call recorded instead of sent."""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

import kubernetes
import pytest
import yaml

from resources import k8s_manifests as m
from resources.k8s_training import KubernetesTrainingLauncher, k8s_model
from resources.launcher import TorchrunLauncher
from tests.support import REPO

DEPLOY = REPO / "deploy" / "k8s"
RUN_ID = "1a2b3c4d-5555-6666-7777-888899990000"
CONFIG = "/yunque/cache/data/base_model/config with space.json"
SECRET_VALUE = "hunter2-do-not-leak"
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def gpu_launcher(**kw) -> KubernetesTrainingLauncher:
    fields = {"image": "registry.example/yunque:1", "nnodes": 3, "nproc_per_node": 8, "gpus_per_node": 8,
              "cpu": "16", "memory": "128Gi", "timeout_s": 3600, "node_selector": {"gpu": "h100"},
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
              "volume_claim": "yunque-shared", "secret_env": {"MLFLOW_TRACKING_TOKEN": "mlflow/token"}}
    return KubernetesTrainingLauncher(**(fields | kw))


def manifests(launcher: KubernetesTrainingLauncher, env: dict[str, str] | None = None) -> dict:
    names = m.training_names(RUN_ID, "base_model", "abcde", "ml")
    labels = m.run_labels(RUN_ID, "base_model", names)
    pod_env, _ = m.literal_env(env or {"MLFLOW_RUN_ID": "r1"})
    prog = launcher.command("model.pretrain.train", "--config", CONFIG)
    jobs = [m.worker_job(launcher, names, prog, pod_env, labels, k) for k in range(1, launcher.nnodes)]
    return {"names": names, "labels": labels, "program": prog,
            "node0": m.training_pod_spec(launcher, names, prog, pod_env, node_rank=0),
            "meta": m.node0_pod_meta(labels), "jobs": jobs, "job": jobs[0] if jobs else None,
            "service": m.rendezvous_service(launcher, names, labels)}


def pods(spec: dict) -> list[dict]:
    """Every PodSpec of a training, node 0 first."""
    return [spec["node0"], *(j["spec"]["template"]["spec"] for j in spec["jobs"])]


def torchrun_line(node_rank: int, rdzv_endpoint: str = "", **kw) -> list[str]:
    fields = {"nproc_per_node": 8, "nnodes": 3, "timeout_s": 3600} | kw
    local = TorchrunLauncher(node_rank=node_rank, rdzv_endpoint=rdzv_endpoint, **fields)
    return ["python" if a == sys.executable else a for a in local.command("model.pretrain.train", "--config", CONFIG)]


def test_single_node_runs_torchruns_command_with_the_images_python() -> None:
    spec = manifests(KubernetesTrainingLauncher(image="x", nproc_per_node=4, timeout_s=60))
    assert spec["program"] == ["python", "-m", "model.pretrain.train", "--config", CONFIG]
    assert spec["jobs"] == [] and "hostname" not in spec["node0"]
    assert spec["node0"]["containers"][0]["command"] == torchrun_line(0, nproc_per_node=4, nnodes=1, timeout_s=60)


def test_every_pod_runs_torchruns_command_for_its_node() -> None:
    """Pod k runs exactly what TorchrunLauncher builds on node k, meeting at node 0's name;
    the rendezvous id is this training's own."""
    spec = manifests(gpu_launcher())
    names = spec["names"]
    for k, pod in enumerate(pods(spec)):
        expected = torchrun_line(k, f"{names.rdzv_host}:29400", rdzv_id=names.base)
        assert pod["containers"][0]["command"] == expected
        assert f"--node-rank={k}" in expected and "--rdzv-backend=c10d" in expected
        assert pod["hostname"] == names.hostname(k) and pod["subdomain"] == names.base
    assert [j["metadata"]["name"] for j in spec["jobs"]] == [names.hostname(1), names.hostname(2)]
    with pytest.raises(ValueError, match="python, -m, module"):
        m.node_command(gpu_launcher(), names, ["torchrun", "train.py"], 0)


def test_rank_zero_lands_in_the_pipes_pod() -> None:
    """torch's c10d rendezvous ranks nodes by sorting their descriptors (FQDN first): node 0's
    name must sort before every worker's, or rank 0 (the Pipes reporter) would run elsewhere."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc

    names = m.training_names(RUN_ID, "base_model", "abcde", "ml")
    workers = [_NodeDesc(names.fqdn(k), 7, 0) for k in range(1, 16)]
    node0 = _NodeDesc(names.rdzv_host, 99, 0)
    assert min([*workers, node0]) is node0  # what sorted(participants)[0] gets
    assert names.rdzv_host == f"{names.hostname(0)}.{names.base}.ml.svc.cluster.local"


def test_names_are_dns_labels_even_for_long_asset_names() -> None:
    names = m.training_names(RUN_ID.upper(), "A_Very_Long_Post_Training_Asset_Name_" * 3, "z9z9z", "ml")
    assert DNS_1035.match(names.base) and DNS_1035.match(names.hostname(99))
    assert len(names.hostname(999)) <= 63


def test_pods_get_their_gpus_shared_memory_volume_and_placement() -> None:
    spec = manifests(gpu_launcher())
    for pod in pods(spec):
        c = pod["containers"][0]
        assert c["resources"] == {"requests": {"cpu": "16", "memory": "128Gi"}, "limits": {"nvidia.com/gpu": "8"}}
        assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
        assert {"name": "shared", "mountPath": "/yunque"} in c["volumeMounts"]
        assert {"name": "shared", "persistentVolumeClaim": {"claimName": "yunque-shared"}} in pod["volumes"]
        assert pod["nodeSelector"] == {"gpu": "h100"} and pod["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert pod["restartPolicy"] == "Never" and pod["activeDeadlineSeconds"] > 3600
    job = spec["job"]["spec"]
    assert (job["completions"], job["parallelism"], job["backoffLimit"]) == (1, 1, m.WORKER_BACKOFF_LIMIT)
    cpu_only = manifests(KubernetesTrainingLauncher(image="x"))["node0"]["containers"][0]
    assert cpu_only["resources"]["limits"] == {} and "ports" not in cpu_only


def test_credentials_are_references_never_values() -> None:
    env = {"MLFLOW_RUN_ID": "r1", "MLFLOW_TRACKING_URI": f"https://user:{SECRET_VALUE}@mlflow.example",
           "AWS_SECRET_ACCESS_KEY": SECRET_VALUE, "NCCL_DEBUG": "WARN"}
    _, left_out = m.literal_env(env)
    assert sorted(left_out) == ["AWS_SECRET_ACCESS_KEY", "MLFLOW_TRACKING_URI"]
    spec = manifests(gpu_launcher(), env)
    assert SECRET_VALUE not in json.dumps({k: v for k, v in spec.items() if k != "names"})
    for pod in pods(spec):
        c = pod["containers"][0]
        assert {"name": "MLFLOW_TRACKING_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "mlflow", "key": "token"}}} in c["env"]
        assert c["envFrom"] == [{"secretRef": {"name": "yunque-env"}}]
        assert {"name": "NCCL_DEBUG", "value": "WARN"} in c["env"]


def test_labels_tie_every_object_to_the_run_and_the_service_to_the_pods() -> None:
    spec = manifests(gpu_launcher())
    names, service = spec["names"], spec["service"]
    pod_labels = [spec["meta"]["labels"], *(j["spec"]["template"]["metadata"]["labels"] for j in spec["jobs"])]
    for labels in [*pod_labels, *(j["metadata"]["labels"] for j in spec["jobs"]), service["metadata"]["labels"]]:
        assert labels["dagster/run-id"] == RUN_ID and labels["dagster/op"] == "base_model"
    assert [labels[m.NODE_LABEL] for labels in pod_labels] == ["0", "1", "2"]
    selector = service["spec"]["selector"].items()
    assert all(selector <= labels.items() for labels in pod_labels)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["name"] == names.base
    assert service["spec"]["ports"][0]["port"] == spec["node0"]["containers"][0]["ports"][0]["containerPort"]


def test_manifests_are_valid_kubernetes_models() -> None:
    """Through the kubernetes client's models (unknown or misspelt fields raise), and node 0
    through dagster-k8s's own pod builder, which adds the Pipes bootstrap variables."""
    from dagster_k8s.pipes import build_pod_body

    spec = manifests(gpu_launcher())
    job = k8s_model(kubernetes.client.V1Job, spec["job"])
    assert job.spec.template.spec.containers[0].resources.limits == {"nvidia.com/gpu": "8"}
    k8s_model(kubernetes.client.V1Service, spec["service"])
    pod = build_pod_body("p", None, None, {"DAGSTER_PIPES_CONTEXT": "ctx"}, spec["meta"], spec["node0"])
    body = kubernetes.client.ApiClient().sanitize_for_serialization(pod)
    container = body["spec"]["containers"][0]
    assert container["name"] == m.CONTAINER and container["command"] == spec["node0"]["containers"][0]["command"]
    assert {"name": "DAGSTER_PIPES_CONTEXT", "value": "ctx"} in container["env"]
    assert body["spec"]["hostname"] == spec["names"].hostname(0)
    with pytest.raises(Exception, match="Unexpected keys"):
        k8s_model(kubernetes.client.V1PodSpec, {**spec["node0"], "restartPolicey": "Never"})


def test_instance_yaml_validates_against_dagsters_schema(tmp_path: Path) -> None:
    from dagster._config import validate_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster_k8s import K8sRunLauncher

    (tmp_path / "dagster.yaml").write_text((DEPLOY / "dagster.yaml").read_text())
    config, _ = dagster_instance_config(str(tmp_path))
    launcher = config["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
    result = validate_config(K8sRunLauncher.config_type(), launcher["config"])
    assert result.success, result.errors
    storage = config["storage"]["custom"]
    assert (storage["module"], storage["class"]) == ("resources.pg_storage", "PostgresStorage")
    from resources.pg_storage import PostgresStorage

    checked = validate_config(PostgresStorage.config_type(), storage["config"])
    assert checked.success, checked.errors
    assert storage["config"]["postgres_url"] == {"env": "YUNQUE_DAGSTER_POSTGRES_URL"}
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator" and config["telemetry"]["enabled"] is False
    root = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert config["concurrency"] == root["concurrency"]
    assert not validate_config(K8sRunLauncher.config_type(), {**launcher["config"], "env_secret": ["x"]}).success


def test_a_per_shard_run_becomes_a_job_from_the_instance_yaml(tmp_path: Path, monkeypatch) -> None:
    """dagster-k8s's K8sRunLauncher, configured from deploy/k8s/dagster.yaml, launches a
    per-shard run; the Job it would submit is recorded instead of sent."""
    from dagster._config import process_config
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.launcher import LaunchRunContext
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.test_utils import instance_for_test
    from dagster_k8s import K8sRunLauncher

    class RecordedBatchApi:
        jobs: list = []  # noqa: RUF012

        def create_namespaced_job(self, body, namespace, **_):
            self.jobs.append((namespace, body))

    kubeconfig = tmp_path / "kubeconfig"  # parsed, never contacted
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c", "users": [{"name": "u", "user": {}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    image = "registry.example/yunque:1"
    monkeypatch.setenv("YUNQUE_K8S_NAMESPACE", "yunque")
    monkeypatch.setenv("YUNQUE_IMAGE", image)
    config = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())["run_launcher"]["config"]
    value = process_config(K8sRunLauncher.config_type(), config).value
    batch = RecordedBatchApi()
    launcher = K8sRunLauncher(**{**value, "load_incluster_config": False, "kubeconfig_file": str(kubeconfig)},
                              k8s_client_batch_api=batch)
    origin = JobPythonOrigin("shard_job", RepositoryPythonOrigin(
        "python", ModuleCodePointer("assets.definitions", "defs", None), container_image=image))
    run = DagsterRun(job_name="shard_job", run_id=RUN_ID, job_code_origin=origin,
                     tags={"dagster/partition": "fortunes-es"})
    with instance_for_test() as instance:
        launcher.register_instance(instance)
        instance.add_run(run)
        launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    namespace, job = batch.jobs[-1]
    body = kubernetes.client.ApiClient().sanitize_for_serialization(job)
    pod = body["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert namespace == "yunque" and container["image"] == image
    assert pod["serviceAccountName"] == "yunque"
    assert {"secretRef": {"name": "yunque-env"}} in container["envFrom"]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "4Gi"}
    assert body["metadata"]["labels"]["dagster/run-id"] == RUN_ID
    assert "execute_run" in container["args"]


def deploy_yaml(name: str) -> list[dict]:
    return list(yaml.safe_load_all((DEPLOY / name).read_text()))


def test_helm_values_have_the_keys_the_chart_reads() -> None:
    values = deploy_yaml("values.yaml")[0]
    chart_keys = {"dagsterWebserver", "dagster-user-deployments", "postgresql", "generatePostgresqlPasswordSecret",
                  "generateCeleryConfigSecret", "rabbitmq", "redis", "flower", "ingress", "imagePullSecrets",
                  "computeLogManager", "scheduler", "runLauncher", "pythonLogs", "dagsterDaemon", "busybox",
                  "migrate", "telemetry", "serviceAccount", "global", "retention", "concurrency",
                  "additionalInstanceConfig"}
    assert set(values) <= chart_keys
    user = values["dagster-user-deployments"]
    deployment = user["deployments"][0]
    assert user["enabled"] is True and deployment["dagsterApiGrpcArgs"] == ["-m", "assets.definitions"]
    assert {"repository", "tag", "pullPolicy"} <= set(deployment["image"])
    assert deployment["includeConfigInLaunchedRuns"] == {"enabled": True}
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    secret = deploy_yaml("secret.example.yaml")
    names = {s["metadata"]["name"] for s in secret}
    assert {s["name"] for s in k8s["envSecrets"] + deployment["envSecrets"]} <= names
    assert values["postgresql"]["enabled"] is False and values["generatePostgresqlPasswordSecret"] is False
    assert "dagster-postgresql-secret" in names and values["telemetry"] == {"enabled": False}
    root = yaml.safe_load((REPO / "dagster.yaml").read_text())["concurrency"]
    assert values["concurrency"]["runs"]["maxConcurrentRuns"] == root["runs"]["max_concurrent_runs"]
    assert values["concurrency"]["pools"]["defaultLimit"] == root["pools"]["default_limit"]
    # the pieces fit: the launcher the code location builds, the claim, the service account
    launcher = KubernetesTrainingLauncher.from_env(deployment["env"])
    assert (launcher.nnodes, launcher.gpus_per_node, launcher.env_secrets) == (2, 8, ["yunque-env"])
    assert launcher.volume_claim == deploy_yaml("volume.example.yaml")[0]["metadata"]["name"]
    assert deployment["volumes"][0]["persistentVolumeClaim"]["claimName"] == launcher.volume_claim
    rbac = {d["kind"]: d for d in deploy_yaml("rbac.yaml")}
    accounts = {s["name"] for s in rbac["RoleBinding"]["subjects"]}
    instance = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())["run_launcher"]["config"]
    assert {user["serviceAccount"]["name"], instance["service_account_name"]} <= accounts
    assert {"services", "jobs", "pods"} <= {r for rule in rbac["Role"]["rules"] for r in rule["resources"]}


def test_example_secret_holds_the_credentials_by_name_only() -> None:
    env = next(s for s in deploy_yaml("secret.example.yaml") if s["metadata"]["name"] == "yunque-env")
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLFLOW_TRACKING_URI", "YUNQUE_HOME",
            "YUNQUE_DAGSTER_POSTGRES_URL"} <= set(env["stringData"])
    assert env["stringData"]["YUNQUE_HOME"].startswith("s3://")


def test_dockerfile_installs_every_package_with_pinned_torch() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "FROM python:3.11-slim" in dockerfile
    assert 'pip install -c constraints.txt -e ".[k8s]"' in dockerfile
    assert "torch==2.13.0" in (REPO / "constraints.txt").read_text()
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in include:
        name = package.rstrip("*")
        assert f"COPY {name} {name}" in dockerfile, name


def test_the_definitions_accept_the_kubernetes_launcher(tmp_path: Path) -> None:
    """Assets annotate `launcher: TorchrunLauncher`; Dagster binds the Kubernetes one there."""
    import dagster as dg

    from assets.definitions import ASSETS, CHECKS, build_resources

    resources = {**build_resources(home=str(tmp_path)), "launcher": KubernetesTrainingLauncher(image="x")}
    dg.Definitions.validate_loadable(dg.Definitions(assets=ASSETS, asset_checks=CHECKS, resources=resources))
