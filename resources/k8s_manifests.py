"""The Kubernetes objects a training submits, as plain manifests (camelCase dicts, as
`kubectl apply` reads them): pure functions of the launcher's configuration, so tests
check them without a cluster.

Layout for nnodes = N: node 0 is the pod that dagster-k8s's PipesK8sClient starts (it
launches one pod and reads the Pipes messages from that pod's logs); nodes 1..N-1 are one
single-pod Job each; a headless Service gives every pod a DNS name `<base>-<k>.<base>`.
Each pod runs exactly the line TorchrunLauncher builds for its node: its own node rank,
the rendezvous on node 0's name. (One Indexed Job would need the rank computed in a shell
from JOB_COMPLETION_INDEX; a Job per node keeps every pod's command literal.)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from resources.launcher import TorchrunLauncher

CONTAINER = "training"
TRAINING_LABEL = "yunque/training"  # ties node 0, the workers and the Service together
NODE_LABEL = "yunque/node-rank"
STARTUP_ALLOWANCE_S = 900  # scheduling and image pull, on top of the training's own timeout
# a worker that starts long before node 0's store listens gives up (torchrun's connect
# timeout); its Job starts it again
WORKER_BACKOFF_LIMIT = 6
JOB_TTL_S = 3600
# names that carry credentials: these come from a Secret, never as literal values
SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|CREDENTIAL|ACCESS_KEY|PRIVATE", re.IGNORECASE)



class PodSettings(Protocol):
    """What the manifests read of the launcher (resources.k8s_training.KubernetesTrainingLauncher
    has every field): a protocol, so that this module does not import the resource that
    imports it."""

    nproc_per_node: int
    nnodes: int
    rdzv_port: int
    timeout_s: int
    grace_s: int
    image: str
    image_pull_policy: str
    service_account: str
    gpus_per_node: int
    cpu: str
    memory: str
    shm_size: str
    node_selector: dict[str, str]
    tolerations: list[dict[str, str]]
    volume_claim: str
    volume_mount_path: str
    env_secrets: list[str]
    env_config_maps: list[str]
    secret_env: dict[str, str]


@dataclass(frozen=True)
class TrainingNames:
    base: str  # the headless Service's name, the pods' subdomain, the rendezvous id
    namespace: str
    cluster_domain: str = "cluster.local"

    def hostname(self, node_rank: int) -> str:
        # also the worker Job's name. torch's c10d rendezvous orders agents by their host
        # names: "<base>-0" sorts first, so torchrun's rank-0 agent is node 0 as well.
        return f"{self.base}-{node_rank}"

    def fqdn(self, node_rank: int) -> str:
        return f"{self.hostname(node_rank)}.{self.base}.{self.namespace}.svc.{self.cluster_domain}"

    @property
    def rdzv_host(self) -> str:
        # the FQDN, not a short name: node 0 finds it in its own /etc/hosts (so torchrun
        # knows it hosts the store before DNS has the record), the workers through DNS
        return self.fqdn(0)


def training_names(run_id: str, op_name: str, suffix: str, namespace: str,
                   cluster_domain: str = "cluster.local") -> TrainingNames:
    """A DNS-1035 label (Service names start with a letter) short enough that every pod
    hostname derived from it stays under 63 characters."""
    op = re.sub(r"[^a-z0-9]+", "-", op_name.lower()).strip("-")[:16].strip("-")
    return TrainingNames(f"yq-{run_id[:8].lower()}-{op}-{suffix}", namespace, cluster_domain)


def program(python: str, module: str, *args: str) -> list[str]:
    """What KubernetesTrainingLauncher.command returns: the training program alone. Each
    pod's torchrun line around it depends on the pod (`node_command`), known at submission."""
    return [python, "-m", module, *args]


def node_command(launcher: PodSettings, names: TrainingNames, prog: list[str],
                 node_rank: int) -> list[str]:
    """TorchrunLauncher's command on node `node_rank`, with the image's interpreter."""
    if prog[1:2] != ["-m"] or len(prog) < 3:
        raise ValueError(f"expected [python, -m, module, args...] (KubernetesTrainingLauncher.command), got {prog}")
    rdzv = f"{names.rdzv_host}:{launcher.rdzv_port}" if launcher.nnodes > 1 else ""
    torchrun = TorchrunLauncher(nproc_per_node=launcher.nproc_per_node, nnodes=launcher.nnodes, node_rank=node_rank,
                                rdzv_endpoint=rdzv, rdzv_id=names.base, timeout_s=launcher.timeout_s,
                                grace_s=launcher.grace_s)
    return [prog[0] if a == sys.executable else a for a in torchrun.command(prog[2], *prog[3:])]


def is_secret(name: str, value: str) -> bool:
    """A credential by its name, or a URL carrying a password (a tracking URI with user:pass@)."""
    try:
        has_password = bool(urlsplit(value).password)
    except ValueError:
        has_password = False
    return bool(SECRET_NAME.search(name)) or has_password


def literal_env(env: dict[str, str]) -> tuple[list[dict[str, str]], list[str]]:
    """Environment entries safe to write into a manifest, and the names left out (they
    must come from the launcher's Secrets)."""
    kept = [{"name": k, "value": v} for k, v in env.items() if not is_secret(k, v)]
    return kept, [k for k, v in env.items() if is_secret(k, v)]


def secret_env(launcher: PodSettings) -> list[dict[str, Any]]:
    """`secret_env` entries ENV -> "secret/key" as secretKeyRef references."""
    refs = []
    for name, ref in launcher.secret_env.items():
        secret, _, key = ref.partition("/")
        refs.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key or name}}})
    return refs


def container(launcher: PodSettings, command: list[str], env: list[dict[str, Any]]) -> dict:
    requests = {k: v for k, v in (("cpu", launcher.cpu), ("memory", launcher.memory)) if v}
    limits = {"nvidia.com/gpu": str(launcher.gpus_per_node)} if launcher.gpus_per_node else {}
    env_from = [{"secretRef": {"name": s}} for s in launcher.env_secrets] + \
               [{"configMapRef": {"name": c}} for c in launcher.env_config_maps]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}] if launcher.shm_size else []
    if launcher.volume_claim:
        mounts.append({"name": "shared", "mountPath": launcher.volume_mount_path})
    spec: dict[str, Any] = {
        "name": CONTAINER, "image": launcher.image, "imagePullPolicy": launcher.image_pull_policy,
        "command": command, "env": env + secret_env(launcher), "envFrom": env_from,
        "resources": {"requests": requests, "limits": limits}, "volumeMounts": mounts,
    }
    if launcher.nnodes > 1:
        spec["ports"] = [{"name": "rdzv", "containerPort": launcher.rdzv_port}]
    return spec


def training_pod_spec(launcher: PodSettings, names: TrainingNames, prog: list[str],
                      env: list[dict[str, Any]], node_rank: int) -> dict:
    """The PodSpec of node `node_rank` (0: the Pipes pod)."""
    command = node_command(launcher, names, prog, node_rank)
    # NCCL and DataLoader workers need more than the container runtime's 64 MiB /dev/shm
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": launcher.shm_size}}] \
        if launcher.shm_size else []
    if launcher.volume_claim:
        volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": launcher.volume_claim}})
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container(launcher, command, env)],
        "volumes": volumes,
        "terminationGracePeriodSeconds": launcher.grace_s + 15,  # model.launch.supervise: SIGTERM, grace_s, SIGKILL
    }
    if launcher.nnodes > 1:
        # with the headless Service: DNS <hostname>.<base>, which torchrun also publishes as
        # MASTER_ADDR when this node's agent is rank 0
        spec |= {"hostname": names.hostname(node_rank), "subdomain": names.base}
    if launcher.timeout_s:
        spec["activeDeadlineSeconds"] = launcher.timeout_s + launcher.grace_s + STARTUP_ALLOWANCE_S
    optional = {"serviceAccountName": launcher.service_account, "nodeSelector": launcher.node_selector,
                "tolerations": launcher.tolerations}
    return spec | {k: v for k, v in optional.items() if v}


def run_labels(run_id: str, op_name: str, names: TrainingNames) -> dict[str, str]:
    """dagster-k8s's own label keys (`kubectl get pods -l dagster/run-id=...` finds them
    with the run's other pods) and the training they belong to."""
    op = re.sub(r"[^a-zA-Z0-9\-_.]", "-", op_name).strip("-_.")[:63]
    return {"dagster/run-id": run_id, "dagster/op": op, "app.kubernetes.io/part-of": "yunque",
            TRAINING_LABEL: names.base}


def node0_pod_meta(labels: dict[str, str]) -> dict:
    """ObjectMeta for the Pipes pod (PipesK8sClient names it itself)."""
    return {"labels": {**labels, NODE_LABEL: "0"}}


def worker_job(launcher: PodSettings, names: TrainingNames, prog: list[str],
               env: list[dict[str, Any]], labels: dict[str, str], node_rank: int) -> dict:
    """Node `node_rank` (1..N-1): a Job of one pod, started again if it fails early."""
    spec: dict[str, Any] = {
        "completions": 1, "parallelism": 1, "backoffLimit": WORKER_BACKOFF_LIMIT, "ttlSecondsAfterFinished": JOB_TTL_S,
        "template": {"metadata": {"labels": {**labels, NODE_LABEL: str(node_rank)}},
                     "spec": training_pod_spec(launcher, names, prog, env, node_rank)},
    }
    if launcher.timeout_s:
        spec["activeDeadlineSeconds"] = launcher.timeout_s + launcher.grace_s + STARTUP_ALLOWANCE_S
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": names.hostname(node_rank), "namespace": names.namespace, "labels": labels},
            "spec": spec}


def rendezvous_service(launcher: PodSettings, names: TrainingNames, labels: dict[str, str]) -> dict:
    """Headless: no proxy, only DNS records for every pod of this training. Records are
    published before the pods are ready, since the rendezvous is what they wait for."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": names.base, "namespace": names.namespace, "labels": labels},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {TRAINING_LABEL: names.base},
                     "ports": [{"name": "rdzv", "port": launcher.rdzv_port, "targetPort": launcher.rdzv_port}]}}
