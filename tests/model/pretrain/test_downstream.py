"""The downstream evaluations during training (model.pretrain.downstream): the step
metrics they give, on a real model and tokenizer, are the report's own measures."""

from __future__ import annotations

import pytest

from model.checkpoint.load import load
from model.core.config import EvalConfig
from model.infer.evaluate import samples
from model.pretrain import downstream
from tests.support.factory import tiny_checkpoint

PAIRS = [{"messages": [{"role": "user", "content": "¿Qué hace apt-get update?"},
                       {"role": "assistant", "content": "Descarga las listas de paquetes de los repositorios."}]},
         {"messages": [{"role": "user", "content": "¿Dónde está la configuración de red?"},
                       {"role": "assistant", "content": "En el archivo /etc/network/interfaces."}]}]


def test_during_training_gives_the_reports_measures_and_its_time(tmp_path):
    loaded = load(tiny_checkpoint(tmp_path))
    model, tok = loaded.model, loaded.tokenizer
    model.train()
    row = downstream.during_training(model, tok, PAIRS, ["La instalación de Debian", "El sistema"], 12, seed=0)
    assert model.training  # back in training mode for the next step
    assert row["eval_domain_qa_pairs"] == 2
    # the same number eval_report computes for these pairs
    assert row["eval_domain_qa_nll"] == downstream.domain_qa(model, tok, PAIRS)["domain_qa_nll"] > 0
    cfg = EvalConfig(prompts=("La instalación de Debian", "El sistema"), sample_tokens=12, seed=0)
    reported = samples(loaded, cfg.prompts, cfg)
    assert row["eval_repeat_4_max"] == max(x["repeat_4"] for x in reported)
    assert row["eval_distinct_2_mean"] == pytest.approx(sum(x["distinct_2"] for x in reported) / 2, abs=1e-4)
    assert row["eval_sample"] == reported[0]["completion"][:200] and row["eval_seconds"] > 0


def test_no_pairs_and_no_prompts_still_time_the_evaluation(tmp_path):
    loaded = load(tiny_checkpoint(tmp_path))
    row = downstream.during_training(loaded.model, loaded.tokenizer, [], [], 8, seed=0)
    assert row["eval_domain_qa_pairs"] == 0 and row["eval_domain_qa_nll"] is None
    assert "eval_repeat_4_max" not in row and row["eval_seconds"] >= 0
