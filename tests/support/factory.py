"""Writes small, realistic corpora for the integration tests: Spanish prose that passes
the quality rules, plus documents each stage should drop."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

WORDS = ["casa", "tiempo", "trabajo", "sistema", "servidor", "archivo", "usuario", "equipo", "programa", "red", "correo", "ciudad", "escuela", "biblioteca", "oficina", "empresa", "proyecto", "comunidad", "versión", "paquete", "manual", "página", "lista", "registro", "permiso", "directorio", "copia", "seguridad", "política", "contraseña", "calendario", "tarea", "impresora", "informe", "ayuda", "herramienta", "núcleo", "memoria", "disco", "pantalla", "teclado", "ventana", "menú", "opción", "mensaje", "respuesta", "pregunta", "problema", "solución", "idea", "historia", "mundo", "país", "gobierno", "ley", "derecho", "salud", "médico", "hospital", "alumno", "profesor", "clase", "curso", "libro", "autor", "lector", "palabra", "idioma", "texto", "capítulo", "sección", "ejemplo", "nuevo", "viejo", "grande", "pequeño", "rápido", "lento", "fácil", "difícil", "seguro", "libre", "público", "privado", "local", "configura", "actualiza", "revisa", "describe", "necesita", "publica", "mantiene", "instala", "comparte", "explica", "protege", "organiza", "traduce", "prueba", "escribe", "lee", "guarda", "abre", "cierra", "busca", "encuentra", "cambia", "mejora", "usa", "crea", "siempre", "nunca", "también", "además", "después", "antes", "ahora", "luego", "pronto", "mañana", "tarde", "noche", "semana", "año"]
STOP = ["de", "la", "que", "el", "en", "y", "a", "los", "del", "se", "las", "por", "un", "para", "con", "no", "una", "su", "al", "lo", "como", "más", "pero", "sus", "le", "ya", "o"]


DETERMINERS = {"el", "la", "los", "las", "un", "una"}


def _noun_after_determiner(words: list[str]) -> list[str]:
    """A determiner is followed by a noun, as in prose (the integrity rule's word order
    drops word salad): a stop word after one is replaced, without drawing from the random
    generator, so the rest of every corpus stays as it was."""
    out = list(words)
    for i in range(len(out) - 1):
        if out[i] in DETERMINERS and out[i + 1] in STOP:
            out[i + 1] = WORDS[(7 * i + len(out)) % len(WORDS)]
    return out


def spanish_text(rng: random.Random, paragraphs: int = 6, sentences: int = 4) -> str:
    """Random Spanish words with stop words mixed in: passes the quality rules (no
    repeated n-grams, enough stop words, sentences ending in a full stop) and fastText
    labels it Spanish with high confidence."""
    paras = []
    for _ in range(paragraphs):
        s = []
        for _ in range(sentences):
            words = [rng.choice(STOP) if rng.random() < 0.4 else rng.choice(WORDS) for _ in range(rng.randint(10, 18))]
            sent = " ".join(_noun_after_determiner(words))
            s.append(sent[0].upper() + sent[1:] + ".")
        paras.append(" ".join(s))
    return "\n\n".join(paras)


# The two-shard corpus supports about 880 BPE tokens; the `tiny` preset asks for 4096.
# Pretraining: a few eager fp32 steps on short windows (what is tested is the plumbing).
# tokenizer.val_fraction: the small corpora need a larger validation split than 5% to fill
# one validation batch (base_model refuses a run whose validation split cannot); with one,
# early stopping would end the long runs the fault tests interrupt: off unless a test asks.
SMALL_TRAIN = {"tokenizer.val_fraction": 0.3, "train.steps": 4, "train.batch_size": 2, "train.seq_len": 32,
               "train.warmup": 1, "train.eval_every": 2, "train.eval_batches": 2, "train.checkpoint_every": 2,
               "train.dtype": "fp32", "train.compile": False, "train.warmup_probe_steps": 1,
               "train.early_stop_patience": 0}
# Evaluation and export: a handful of problems and tokens, one GGUF type.
SMALL_EVAL = {"eval.math_problems": 8, "eval.sample_tokens": 16, "eval.math_max_new_tokens": 16,
              "eval.val_batches": 2, "export.gguf": ["q8_0"]}
# Post-training: two steps of every stage on a dozen examples (the plumbing, not the learning).
POST_STAGES = ("sft", "reward", "dpo", "ppo", "grpo")
SMALL_POST = {f"post.{s}.{k}": v for s in POST_STAGES for k, v in
              {"steps": 2, "warmup": 1, "batch_size": 2, "examples": 12, "eval_every": 1,
               "heldout_fraction": 0.25}.items()}
SMALL_POST |= {f"post.{s}.{k}": v for s in ("ppo", "grpo") for k, v in {"dev_problems": 2, "max_new_tokens": 12}.items()}
SMALL_POST |= {"post.grpo.group": 2}
SMALL_RUN = json.dumps({"tokenizer.vocab_size": 512, **SMALL_TRAIN, **SMALL_EVAL, **SMALL_POST})

ENGLISH = ("The administrator configures the mail server every week, and the team reviews the log files "
           "before each update. ") * 8

HTML_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title></head><body>
<nav><ul><li><a href="/">Inicio</a></li><li><a href="/a">Anterior</a></li><li><a href="/s">Siguiente</a></li></ul></nav>
<div id="cookie">Usamos cookies para mejorar su experiencia. Aceptar</div>
<main><article><h1>{title}</h1>{body}</article></main>
<footer>Copyright 2024 Proyecto de documentación. Todos los derechos reservados.</footer></body></html>"""


def html_page(title: str, text: str) -> str:
    body = "".join(f"<p>{p}</p>" for p in text.split("\n\n"))
    return HTML_PAGE.format(title=title, body=body)


def write_two_shards(root: Path, seed: int = 0) -> dict[str, int]:
    """Two shards (`manuales`, `foro`) with a known mix; returns counts of what each stage
    should drop. The planted near-duplicate lives in the second shard, its original in
    the first."""
    rng = random.Random(seed)
    a, b = root / "manuales", root / "foro"
    (a / "html").mkdir(parents=True)
    b.mkdir(parents=True)
    original = spanish_text(rng, paragraphs=8)
    for i in range(6):
        (a / "html" / f"pagina{i}.html").write_text(html_page(f"Capítulo {i}", spanish_text(rng)), encoding="utf-8")
    (a / "guia.txt").write_text(original, encoding="utf-8")
    (a / "notas.md").write_text("# Notas\n\n" + spanish_text(rng), encoding="utf-8")
    (a / "english.txt").write_text(ENGLISH, encoding="utf-8")  # langid drop
    (a / "corto.txt").write_text("Hola a todos.", encoding="utf-8")  # quality drop
    lines = [json.dumps({"text": spanish_text(rng)}, ensure_ascii=False) for _ in range(4)]
    lines.insert(2, '{"text": "sin cerrar')  # malformed record
    # near-duplicate of guia.txt: one word changed
    lines.append(json.dumps({"text": original.replace("además", "también", 1)}, ensure_ascii=False))
    (b / "mensajes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with gzip.open(b / "archivo.txt.gz", "wt", encoding="utf-8") as f:
        f.write(spanish_text(rng))
    data = gzip.compress(spanish_text(rng).encode())
    (b / "roto.txt.gz").write_bytes(data[: len(data) // 2])  # truncated gzip
    return {"read_rejects": 2, "langid": 1, "near_duplicate": 1}


def add_shard(root: Path, name: str, seed: int = 1, docs: int = 3) -> Path:
    rng = random.Random(seed)
    d = root / name
    d.mkdir(parents=True)
    for i in range(docs):
        (d / f"doc{i}.txt").write_text(spanish_text(rng), encoding="utf-8")
    return d


def tokenizer_dir(root: Path, vocab: int = 400, seed: int = 0) -> Path:
    """A byte-level BPE tokenizer trained on generated Spanish, saved as the asset saves it."""
    from pipelines.tokens.tokenizer import save_pretrained, train_bpe

    rng = random.Random(seed)
    texts = [spanish_text(rng) + " 12 + 34 = 46. ¿Cuánto es 7 por 8? <answer>56</answer>" for _ in range(60)]
    directory = root / "tokenizer"
    save_pretrained(train_bpe(texts, vocab), directory, max_length=64)
    return directory


def tiny_checkpoint(root: Path, seed: int = 0, train_config: dict | None = None, **model_overrides) -> Path:
    """A randomly initialised small model saved as a training checkpoint with its tokenizer.
    Weights are scaled up so that the logits are far from uniform (a real test of equality)."""
    import dataclasses

    import torch

    from model.checkpoint import state as ckpt
    from model.core.config import ModelConfig
    from model.core.gpt import GPT

    tok = tokenizer_dir(root)
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(tok / "tokenizer.json")).get_vocab_size()
    cfg = ModelConfig(**{"dim": 64, "n_layers": 2, "n_heads": 4, "ffn_dim": 128, "context": 64,
                         "vocab_size": vocab, **model_overrides})
    torch.manual_seed(seed)
    model = GPT(cfg)
    model.reset_parameters(std=0.08)
    saved = ckpt.save(root / "base_model", 10, model.state_dict(), {}, {
        "model_config": dataclasses.asdict(cfg), "metrics": {"loss": 5.0},
        **({"train_config": train_config} if train_config is not None else {})}, tied=cfg.tie_embeddings,
        tokenizer=tok)
    return saved.path


def answering_checkpoint(root: Path, answer: int, steps: int = 40) -> Path:
    """tiny_checkpoint trained to reply `<answer>{answer}</answer>` to every chat prompt,
    whatever it asks: greedy math accuracy on a problem set is then known without the model,
    the share of its problems whose answer is `answer` (the base model's checkpoint again,
    step 10). Trained on training-split problems; prompts longer than the context keep their
    end, as generation keeps it."""
    import torch

    from model.checkpoint import state as ckpt
    from model.checkpoint.load import load
    from model.core.batches import collate, encode_reply
    from model.post.losses import sft_loss
    from pipelines.tasks import math_tasks

    loaded = load(tiny_checkpoint(root))
    model, tok, context = loaded.model, loaded.tokenizer, loaded.config.context
    rows = [encode_reply(tok, math_tasks.prompt_for(p), f"<answer>{answer}</answer>")
            for p in math_tasks.spanish_problems(128, "train", "add2", seed=0)]
    for r in rows:
        r.ids, r.trained = r.ids[-(context - 4):], r.trained[-(context - 4):]
    batch = collate(rows, tok.eot_id)
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        pick = torch.randint(0, len(rows), (16,))
        logits, _ = model(batch.idx[pick])
        sft_loss(logits, batch.targets[pick]).backward()
        opt.step()
        opt.zero_grad()
    return ckpt.save(root / "base_model", 10, model.state_dict(), {}, loaded.state, tied=loaded.config.tie_embeddings,
                     tokenizer=tok.directory).path


def record_base(checkpoint: Path) -> dict:
    """A base_model record for a factory checkpoint (tiny_checkpoint, under
    <home>/data/base_model): a finished run of its step count, on no token shards."""
    from model.checkpoint.files import Checkpoint
    from pipelines.tokens.tokenizer import file_hash
    from stages.store.outputs import DataStore
    from stages.training.lineage import record_materialized
    from stages.training.runs import RunSpec

    store = DataStore(checkpoint.parent.parent.parent)
    step = int(checkpoint.name.split("-")[1])
    spec = RunSpec("base_model", store.dir("base_model"), "factory", {"train": {"steps": step}},
                   {"tokenizer_hash": file_hash(checkpoint / "tokenizer" / "tokenizer.json"), "token_shards": {}})
    return record_materialized(store, "base_model", spec, Checkpoint(checkpoint, step), "factory", "")


def recommit(store, asset: str, shard: str | None = None) -> None:
    """Record an output's files, as a test edited them, in its manifest's checksums: the
    test stands for a stage that committed that content (without this, the store rightly
    calls the edited output damaged and refuses to read it)."""
    from stages.store import integrity
    from stages.store.outputs import MANIFEST

    directory = store.dir(asset, shard)
    m = json.loads((directory / MANIFEST).read_text())
    side = {Path(p).relative_to(store.data).as_posix(): Path(p) for p in m.get("side_files", [])}
    m[integrity.CHECKSUMS] = integrity.records(directory, m["files"], side)
    (directory / MANIFEST).write_text(json.dumps(m, indent=1, sort_keys=True))
