"""The checkpoint a command uses is the one the asset reports: `--checkpoint <asset dir>`
is the checkpoint its materialization recorded (the best, when early stopping kept an
earlier step than the last on disk), said on stderr; `<asset dir>/step-N` picks one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.factory import tiny_checkpoint
from tests.support.ui_server import REPO, YUNQUE


def _second_step(directory: Path, step: int, seed: int) -> Path:
    """Another checkpoint of the same model shape in the same asset directory, other weights."""
    import torch

    from model.checkpoint import state as ckpt
    from model.checkpoint.load import load

    first = load(directory / "step-00000010")
    torch.manual_seed(seed)
    first.model.reset_parameters(std=0.08)
    saved = ckpt.save(directory, step, first.model.state_dict(), {}, first.state, tied=first.config.tie_embeddings,
                      tokenizer=first.checkpoint.path / ckpt.TOKENIZER_DIR)
    return saved.path


@pytest.fixture(scope="module")
def early_stopped(tmp_path_factory) -> Path:
    """data/base_model as an early-stopped run leaves it: steps 10 (the best) and 20 (the
    stop), best.json naming 10, and the record naming 10."""
    from stages.training.lineage import RECORD_FILE, weights_of

    data = tmp_path_factory.mktemp("home") / "data"
    best = tiny_checkpoint(data, seed=0)
    directory = best.parent
    _second_step(directory, 20, seed=1)
    (directory / "best.json").write_text(json.dumps({"step": 10, "val_loss": 4.457, "stopped_at": 20,
                                                     "last_step": 20, "evals_since_best": 1}))
    (directory / RECORD_FILE).write_text(json.dumps({"format": 1, "asset": "base_model", "run_key": "k",
                                                     "final_step": 40, "checkpoint": str(best), "step": 10,
                                                     **weights_of(best)}))
    return directory


def _generate(checkpoint: Path) -> subprocess.CompletedProcess:
    return subprocess.run([YUNQUE, "generate", "--checkpoint", str(checkpoint), "--prompt", "La red",
                           "--max-new-tokens", "24", "--temperature", "1.0", "--seed", "3"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)


def test_an_asset_directory_is_its_recorded_checkpoint_not_the_newest(early_stopped):
    chosen, best, last = (_generate(p) for p in (early_stopped, early_stopped / "step-00000010",
                                                  early_stopped / "step-00000020"))
    assert chosen.returncode == 0, chosen.stderr
    assert (f"{early_stopped}: step 10, the checkpoint base_model materialized (its best, by validation loss; "
            f"the run went on to step 20); another step: --checkpoint {early_stopped}/step-N") in chosen.stderr
    assert chosen.stdout == best.stdout != last.stdout


def test_a_directory_of_checkpoints_without_a_record_is_its_newest_and_says_so(early_stopped, tmp_path):
    import shutil

    unfinished = tmp_path / "data" / "base_model"
    shutil.copytree(early_stopped, unfinished)
    (unfinished / "materialized.json").unlink()
    done, last = _generate(unfinished), _generate(unfinished / "step-00000020")
    assert done.returncode == 0, done.stderr
    assert (f"{unfinished}: no materialized.json (a run not materialized to its end): step 20, the newest intact "
            f"checkpoint, which no stage has used; another step: --checkpoint {unfinished}/step-N") in done.stderr
    assert done.stdout == last.stdout
