"""Training on a Kubernetes cluster: the same interface as TorchrunLauncher (`command`,
`client().run(context=, command=, env=)`), so assets/training/launching.py runs either unchanged.

Node 0 runs in the pod that dagster-k8s's PipesK8sClient starts: that client launches one
pod and reads the Pipes messages from its logs (it has no Job support), so the rank that
reports must live there. Nodes 1..N-1 are a Job each beside it, found through a headless
Service; the manifests are built in resources.k8s_manifests.

`command` returns the training program alone ([python, -m, module, args...]): the torchrun
line around it differs per pod (node rank, node 0's name, known once the run is submitted),
so the client builds one per pod with TorchrunLauncher.
"""

from __future__ import annotations

import json
import os
import secrets
import string
from collections.abc import Callable, Mapping
from typing import TypeVar

import dagster as dg
import kubernetes
from dagster._core.errors import DagsterPipesExecutionError
from dagster._core.storage.tags import DOCKER_IMAGE_TAG
from dagster_k8s.client import DagsterK8sError, DagsterKubernetesClient
from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict
from dagster_k8s.pipes import PipesK8sClient
from dagster_k8s.utils import detect_current_namespace

from resources import k8s_manifests as m

T = TypeVar("T")


class KubernetesTrainingLauncher(dg.ConfigurableResource):
    """torchrun on `nnodes` pods of `image`, `gpus_per_node` GPUs and `nproc_per_node`
    processes each. Credentials reach the pods only by reference: `env_secrets` (envFrom)
    and `secret_env` (ENV -> "secret/key", secretKeyRef)."""

    # the TorchrunLauncher's fields (node_rank, rdzv_endpoint and rdzv_id are derived per training and pod)
    nproc_per_node: int = 1
    nnodes: int = 1
    rdzv_port: int = 29400
    env: dict[str, str] = {}  # noqa: RUF012 - pydantic copies defaults; NCCL_*, OMP_NUM_THREADS, ... (no secrets)
    timeout_s: int = 0  # stop the training after this many seconds (0: no limit)
    grace_s: int = 10  # between SIGTERM and SIGKILL when stopping
    # the pods
    image: str = ""  # the user-code image (deploy/k8s/Dockerfile); "": the run's own (K8sRunLauncher tags it)
    image_pull_policy: str = "IfNotPresent"
    python: str = "python"  # the image's interpreter (this process's sys.executable may not exist there)
    namespace: str = ""  # "": the namespace this process runs in, else "default"
    service_account: str = ""
    gpus_per_node: int = 0  # limits nvidia.com/gpu; usually equal to nproc_per_node
    cpu: str = ""  # requests, e.g. "8"
    memory: str = ""  # requests, e.g. "64Gi"
    shm_size: str = "8Gi"  # /dev/shm as a memory-backed volume ("": the runtime's 64 MiB)
    node_selector: dict[str, str] = {}  # noqa: RUF012
    tolerations: list[dict[str, str]] = []  # noqa: RUF012 - e.g. [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # The training reads its config and writes its records under the run's home paths: mount
    # one ReadWriteMany claim at the same path here and in the run pods (YUNQUE_HOME, or
    # YUNQUE_CACHE for an s3:// home, under it); checkpoints also reach an s3:// home directly.
    volume_claim: str = ""
    volume_mount_path: str = "/yunque"
    env_secrets: list[str] = ["yunque-env"]  # noqa: RUF012 - deploy/k8s/secret.example.yaml
    env_config_maps: list[str] = []  # noqa: RUF012
    secret_env: dict[str, str] = {}  # noqa: RUF012
    cluster_domain: str = "cluster.local"

    def command(self, module: str, *args: str) -> list[str]:
        """The program; `client().run` wraps it in each pod's torchrun line (module docstring)."""
        if self.nnodes < 1 or self.nproc_per_node < 1:
            raise dg.Failure(f"KubernetesTrainingLauncher: nnodes={self.nnodes}, nproc_per_node={self.nproc_per_node}")
        return m.program(self.python, module, *args)

    def client(self) -> KubernetesTrainingClient:
        return KubernetesTrainingClient(self)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> KubernetesTrainingLauncher:
        """The code location's choice (assets.definitions) from YUNQUE_* variables, which
        the Helm values set on the user deployment."""
        def num(name: str, default: int) -> int:
            return int(environ.get(name) or default)

        def listed(name: str) -> list[str]:
            return [x for x in environ.get(name, "").split(",") if x]

        return cls(nproc_per_node=num("YUNQUE_NPROC_PER_NODE", 1), nnodes=num("YUNQUE_NNODES", 1),
                   timeout_s=num("YUNQUE_TRAIN_TIMEOUT", 0), gpus_per_node=num("YUNQUE_GPUS_PER_NODE", 0),
                   image=environ.get("YUNQUE_K8S_IMAGE", ""), namespace=environ.get("YUNQUE_K8S_NAMESPACE", ""),
                   cpu=environ.get("YUNQUE_K8S_CPU", ""), memory=environ.get("YUNQUE_K8S_MEMORY", ""),
                   volume_claim=environ.get("YUNQUE_K8S_VOLUME_CLAIM", ""),
                   volume_mount_path=environ.get("YUNQUE_K8S_VOLUME_PATH", "/yunque"),
                   env_secrets=listed("YUNQUE_K8S_ENV_SECRETS") or ["yunque-env"],
                   env_config_maps=listed("YUNQUE_K8S_ENV_CONFIG_MAPS"),
                   node_selector=json.loads(environ.get("YUNQUE_K8S_NODE_SELECTOR") or "{}"),
                   tolerations=json.loads(environ.get("YUNQUE_K8S_TOLERATIONS") or "[]"))


def _load_config() -> None:
    """In a pod: its service account; elsewhere: the kubeconfig (as PipesK8sClient does)."""
    if os.getenv("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config()
    else:
        kubernetes.config.load_kube_config()


class KubernetesTrainingClient:
    """Submits one training: Service and worker Jobs (several nodes), then node 0 through
    PipesK8sClient; deletes them all when it ends, however it ends."""

    def __init__(self, launcher: KubernetesTrainingLauncher):
        self.launcher = launcher

    def run(self, *, context: dg.AssetExecutionContext, command: list[str], env: dict[str, str] | None = None,
            extras: dict | None = None) -> dg.PipesClientCompletedInvocation:
        launcher = self.launcher
        if not launcher.image:  # the run's own image: the training runs the code the run worker runs
            image = context.run.tags.get(DOCKER_IMAGE_TAG)
            if not image:
                raise dg.Failure("KubernetesTrainingLauncher: no image (set `image`, or launch the run with "
                                 "dagster-k8s's K8sRunLauncher, which records it on the run)")
            launcher = launcher.model_copy(update={"image": image})
        _load_config()
        api = DagsterKubernetesClient.production_client()
        namespace = launcher.namespace or detect_current_namespace(None) or "default"
        suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        names = m.training_names(context.run_id, context.op.name, suffix, namespace, launcher.cluster_domain)
        labels = m.run_labels(context.run_id, context.op.name, names)
        pod_env, left_out = m.literal_env({**launcher.env, **(env or {})})
        if left_out:
            context.log.warning(f"not written into the pod specs (credentials come from {launcher.env_secrets} "
                                f"and secret_env): {', '.join(left_out)}")
        if not launcher.volume_claim:
            context.log.warning("no volume_claim: the training pods see only the image and the object store, "
                                "not this run's local files (its --config, the local home or cache)")
        # every manifest is built (and checked against the client's models) before anything is submitted
        node0 = m.training_pod_spec(launcher, names, command, pod_env, node_rank=0)
        k8s_model(kubernetes.client.V1PodSpec, node0)
        workers = [k8s_model(kubernetes.client.V1Job, m.worker_job(launcher, names, command, pod_env, labels, k))
                   for k in range(1, launcher.nnodes)]
        try:
            if workers:
                service = m.rendezvous_service(launcher, names, labels)
                api.core_api.create_namespaced_service(names.namespace, k8s_model(kubernetes.client.V1Service, service))
                for job in workers:
                    api.batch_api.create_namespaced_job(names.namespace, job)
            return self._run_node0(launcher, context, api, names, node0, labels, extras)
        finally:
            if workers:
                self._delete_workers(api, names)

    @staticmethod
    def _run_node0(launcher: KubernetesTrainingLauncher, context: dg.AssetExecutionContext,
                   api: DagsterKubernetesClient, names: m.TrainingNames, spec: dict, labels: dict[str, str],
                   extras: dict | None) -> dg.PipesClientCompletedInvocation:
        context.log.info(f"training {names.base} in {names.namespace}: {launcher.nnodes} node(s) x "
                         f"{launcher.nproc_per_node} process(es); pods: kubectl get pods -n {names.namespace} "
                         f"-l {m.TRAINING_LABEL}={names.base}")
        try:
            # pod_wait_timeout 0: no client-side limit (training may run for days);
            # activeDeadlineSeconds bounds the pod when timeout_s is set
            return PipesK8sClient().run(context=context, extras=extras, namespace=names.namespace,
                                        base_pod_meta=m.node0_pod_meta(labels), base_pod_spec=spec,
                                        pod_wait_timeout=0, delete_pod_on_completion=False)
        except DagsterK8sError as e:
            # run_program explains a failure by the supervisor's exit code, as for a local process
            code = _node0_exit_code(api, names)
            raise DagsterPipesExecutionError(f"External execution process failed with code {code}"
                                             if code is not None else f"the training pod failed: {e}") from e
        finally:
            _delete_quietly(lambda: api.core_api.delete_collection_namespaced_pod(
                names.namespace, label_selector=_node0_selector(names)))

    @staticmethod
    def _delete_workers(api: DagsterKubernetesClient, names: m.TrainingNames) -> None:
        _delete_quietly(lambda: api.batch_api.delete_collection_namespaced_job(  # their pods go with them
            names.namespace, label_selector=f"{m.TRAINING_LABEL}={names.base}", propagation_policy="Background"))
        _delete_quietly(lambda: api.core_api.delete_namespaced_service(names.base, names.namespace))


def k8s_model(cls: type[T], manifest: dict) -> T:
    """The kubernetes client's model; unknown or misspelt fields raise here, before submitting."""
    return k8s_model_from_dict(cls, k8s_snake_case_dict(cls, manifest))


def _node0_selector(names: m.TrainingNames) -> str:
    return f"{m.TRAINING_LABEL}={names.base},{m.NODE_LABEL}=0"


def _node0_exit_code(api: DagsterKubernetesClient, names: m.TrainingNames) -> int | None:
    pods = api.core_api.list_namespaced_pod(names.namespace, label_selector=_node0_selector(names)).items
    for pod in pods:
        for status in pod.status.container_statuses or []:
            if status.name == m.CONTAINER and status.state and status.state.terminated:
                return status.state.terminated.exit_code
    return None


def _delete_quietly(delete: Callable[[], object]) -> None:
    """Cleanup must not hide the training's own error; what is already gone is fine."""
    try:
        delete()
    except kubernetes.client.ApiException as e:
        if e.status != 404:
            dg.get_dagster_logger().warning(f"cleanup of the training's Kubernetes objects: {e}")
    except Exception as e:  # noqa: BLE001 - an unreachable API server, say: report, keep the first error
        dg.get_dagster_logger().warning(f"cleanup of the training's Kubernetes objects: {e}")
