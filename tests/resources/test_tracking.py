"""What the UIs show: the MLflow experiment opens as a model-training one (its kind tag,
read back from a real sqlite store, and the names MLflow's UI bundle uses for it), the
model registry under an alias, and plots inline in Dagster metadata (the data: URI that
dagster-webserver's markdown sanitizer lets through)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import dagster as dg
import mlflow
import pytest
from mlflow.tracking import MlflowClient

from assets.metadata import image
from resources.tracking import EXPERIMENT_KIND_TAG, MODEL_TRAINING, MlflowTracking

SITE = Path(mlflow.__file__).parent.parent


def _client(tracking: MlflowTracking) -> MlflowClient:
    return MlflowClient(tracking.uri())


def test_the_ui_bundle_knows_the_kind_we_set():
    """The tag and value are the UI's own (an MLflow upgrade that renames them fails here),
    and so is the workflowType switch that ui_url sets."""
    js = "".join(p.read_text(errors="ignore") for p in (SITE / "mlflow/server/js/build/static/js").glob("*.js"))
    assert f'"{EXPERIMENT_KIND_TAG}"' in js
    assert f'CUSTOM_MODEL_DEVELOPMENT="{MODEL_TRAINING}"' in js
    assert 'MACHINE_LEARNING="machine_learning"' in js and '.get("workflowType")' in js


def test_experiment_kind_on_a_new_and_an_existing_experiment(tmp_path):
    tracking = MlflowTracking(home=str(tmp_path / "a"))
    run_id = tracking.start_run("base_model", {"train": {"lr": 0.1}}, {"k": "v"})
    client = _client(tracking)
    exp = client.get_experiment_by_name("yunque")
    assert exp.tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING
    assert client.get_run(run_id).info.experiment_id == exp.experiment_id
    assert exp.artifact_location == (tmp_path / "a" / "mlflow" / "artifacts").absolute().as_uri()
    url = tracking.ui_url(run_id)
    assert url == f"http://127.0.0.1:5000/#/experiments/{exp.experiment_id}/runs/{run_id}?workflowType=machine_learning"

    # an experiment made before the tag existed gets it; one whose kind a user chose keeps it
    old = MlflowTracking(home=str(tmp_path / "a"), experiment="older")
    chosen = MlflowTracking(home=str(tmp_path / "a"), experiment="chosen")
    client.create_experiment("older")
    client.create_experiment("chosen", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    old.start_run("x", {}, {})
    chosen.start_run("x", {}, {})
    assert client.get_experiment_by_name("older").tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING
    assert client.get_experiment_by_name("chosen").tags[EXPERIMENT_KIND_TAG] == "genai_development"


def test_register_version_moves_the_alias(tmp_path, monkeypatch):
    tracking = MlflowTracking(home=str(tmp_path))
    assert tracking.aliased_version("yunque", "champion") is None  # no registered model yet
    versions = []
    for n in range(2):
        export = tmp_path / f"export{n}"
        export.mkdir()
        (export / "model.safetensors").write_bytes(bytes([n]) * 64)
        (export / "config.json").write_text(json.dumps({"n": n}))
        run_id = tracking.start_run("promotion", {}, {})
        tracking.log_dir(run_id, export, "model")
        versions.append(tracking.register_version("yunque", "champion", run_id, "model", {"yunque.n": str(n)}))
        tracking.finish(run_id, "FINISHED")
    assert versions == ["1", "2"]
    client = _client(tracking)
    mv = client.get_model_version_by_alias("yunque", "champion")
    assert str(mv.version) == "2" and mv.tags["yunque.n"] == "1"
    assert tracking.aliased_version("yunque", "champion")["version"] == "2"
    assert tracking.aliased_version("yunque", "other") is None  # the model exists, the alias does not
    # the version's source is the run's copy, not the export directory (the next export
    # replaces that); models:/ URIs resolve in the registry of MLFLOW_TRACKING_URI
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.uri())
    got = mlflow.artifacts.download_artifacts(artifact_uri="models:/yunque@champion", dst_path=str(tmp_path / "dl"))
    assert (Path(got) / "model.safetensors").read_bytes() == bytes([1]) * 64


def _png(path: Path, points: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3), dpi=80)
    ax.plot(range(points), [i * i % 7 for i in range(points)])
    fig.savefig(path)
    plt.close(fig)
    return path


def test_image_inlines_a_small_png_and_falls_back_to_its_path(tmp_path):
    png = _png(tmp_path / "loss_curves.png", 50)
    md = image(png, "loss [curves]\nper stage")
    assert isinstance(md, dg.MarkdownMetadataValue)
    m = re.fullmatch(r"!\[([^\]\n]*)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", md.value)
    assert m and m.group(1) == "loss curves per stage"
    assert base64.b64decode(m.group(2)) == png.read_bytes()

    with pytest.warns(UserWarning, match="over the 100 shown inline"):
        assert image(png, "big", limit=100) == dg.MetadataValue.path(str(png))
    (tmp_path / "x.png").write_text("not an image")
    with pytest.warns(UserWarning, match="not a PNG"):
        assert isinstance(image(tmp_path / "x.png", "x"), dg.PathMetadataValue)
    with pytest.warns(UserWarning, match="missing"):
        assert isinstance(image(tmp_path / "gone.png", "x"), dg.PathMetadataValue)


def test_the_webserver_lets_data_uris_through_its_markdown_sanitizer():
    """dagster-webserver's MarkdownWithPlugins adds "data" to rehype-sanitize's `src`
    protocols, and the page's CSP restricts no images: what `image` relies on."""
    import dagster_webserver

    build = Path(dagster_webserver.__file__).parent / "webapp" / "build"
    chunks = [p.read_text(errors="ignore") for p in (build / "_next" / "static" / "chunks").glob("*.js")]
    markdown = [c for c in chunks if "MarkdownWithPlugins" in c and "rehypePlugins" in c]
    assert markdown and any(re.search(r'protocols:\{src:\[.{0,120}?"data"\]', c) for c in markdown)
    csp = (build / "csp-header.txt").read_text()
    assert "img-src" not in csp and "default-src" not in csp


def test_an_inline_image_survives_the_event_log(tmp_path):
    png = _png(tmp_path / "p.png", 200)

    @dg.asset
    def plotted() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"plot": image(png, "a plot")})

    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        assert dg.materialize([plotted], instance=instance).success
        event = instance.get_latest_materialization_event(dg.AssetKey("plotted"))
        stored = event.asset_materialization.metadata["plot"].value
    assert stored.endswith(")") and base64.b64decode(stored.split(",", 1)[1][:-1]) == png.read_bytes()
