"""What the model half's Spanish generators produce, as one JSON-able dict: the chat turns,
a fixed seed's math problems (training and held-out wordings, every level), the SFT and
preference sets made from them, and the question-answer pairs of a fixed set of documents.

tests/data/es_model_half.json.gz holds this snapshot as the code wrote it before the Spanish
texts moved into pipelines/languages/es/ (chat.toml, math.toml, qa.toml);
tests/pipelines/test_language_packs.py checks the code still writes it byte for byte. The same function
ran on the old code (hence the two names of the instruction and of the evaluation sets).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

BODY = ("Este apartado explica con detalle el procedimiento completo, paso a paso, para que el sistema funcione "
        "sin problemas en la mayoría de los casos.")
BODY2 = "Después de hacerlo, compruebe el resultado con la orden correspondiente y revise el registro del sistema."
BODY3 = ("La herramienta guarda la configuración en su carpeta personal; si la borra, el programa vuelve a los "
         "valores de fábrica la próxima vez que lo abra.")


def _lines(*lines: str) -> str:
    return "\n".join(lines)


ENGLISH = "The package is installed with the usual tools and it is ready to use with the rest of the system."

# a man page as the sample's manpages-es shard renders it (tests/pipelines/tasks/test_domain_qa.py uses it too)
MAN_MEV = (
    "MEV(1)                 General Commands Manual                 MEV(1)",
    "mev - un programa para informar de los eventos del ratón",
    "mev [ opciones ]",
    "El programa mev es parte del paquete gpm y se ha realizado tomando como modelo",
    "xev. Imprime en la salida estándar los eventos que recibe del ratón.",
    "FORMATO DE ENTRADA",
    "La orden puede leer el mapa en uno de dos formatos distintos, binario o de",
    "texto, según lo que encuentre al principio del fichero que se le indica.",
    "INFORMAR DE ERRORES", "Informe de cualquier error de traducción a la lista de correo del equipo.",
)

DOCUMENTS = [
    ("doc-1", "handbook", _lines("Guía de la red", "3.2. Configurar la red", BODY, BODY2,
                                     "3.3. Opciones de impresión avanzadas", BODY2 + " " + BODY, BODY,
                                     "Tabla 3.1. Valores", "$ sudo apt install foo", "Nota final corta")),
    ("man-mev", "manpages-es", _lines(*MAN_MEV)),
    ("doc-2", "help", _lines(
        "FreedomBox", "Capítulo 4. Transmission y sus puertos", "Para usar Transmission, abra el puerto. " + BODY,
        "¿Qué es un servidor doméstico ?", BODY3 + " " + BODY2, "Ejemplos", BODY, ENGLISH,
        "Para definir un estilo nuevo", BODY2 + " " + BODY3, "Instalarlo desde el repositorio", BODY,
        "Licencia", BODY3, "Las copias de seguridad del sistema", BODY3, BODY2,
        "Vaya a Insertar ▸ Campo", BODY, "Muestra las opciones disponibles", BODY2 + " " + BODY,
        "Apéndice A. Configuración del router", BODY + " " + BODY3)),
    ("doc-3", "fortunes", _lines(
        "Búsquedas y versiones.", "1.1 Buscar paquetes en el archivo", BODY,
        "la continuación de una línea que sigue", BODY2, "1.2 Actualizar el sistema", BODY3, BODY)),
]

HEADINGS = ["Configurar la red", "Opciones de impresión avanzadas", "Transmission y sus puertos", "Ejemplos",
            "¿Qué es Transmission ?", "Para definir un estilo nuevo", "Instalar paquetes desde el repositorio",
            "Las copias de seguridad del sistema", "Instalarlo", "FORMATO DE ENTRADA", "Redes en casa",
            "Imprimir", "Ayer y hoy", "Router doméstico", "Compartir archivos en la red local"]
TITLES = ["", "FreedomBox", "GitWeb"]

GSM8K = ('{"question": "Natalia vendió 48 clips en abril y la mitad en mayo. ¿Cuántos vendió?", '
         '"answer": "En mayo vendió 48/2 = <<48/2=24>>24.\\nEn total 48+24 = <<48+24=72>>72.\\n#### 72"}\n')


def _plain(x):
    if dataclasses.is_dataclass(x):
        return {k: _plain(v) for k, v in dataclasses.asdict(x).items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def snapshot() -> dict:
    from pipelines.tasks import chitchat, domain_qa, math_tasks, post_data

    instruction = math_tasks.INSTRUCTION if hasattr(math_tasks, "INSTRUCTION") else math_tasks.instruction("es")
    sets = math_tasks.EVAL_SETS if hasattr(math_tasks, "EVAL_SETS") else math_tasks.eval_sets()
    out: dict = {"chitchat": chitchat.records(), "instruction": instruction}
    math: dict = {}
    for level in math_tasks.LEVELS:
        math[f"train/{level}/0"] = math_tasks.spanish_problems(200, "train", level, 0)
        math[f"train/{level}/7"] = math_tasks.spanish_problems(200, "train", level, 7)
        math[f"heldout/{level}/0"] = math_tasks.spanish_problems(60, "heldout", level, 0)
        math[f"rephrased/{level}/0"] = math_tasks.spanish_problems(60, "heldout", level, 0, "heldout")
    for name in sets:
        if name.startswith("es_"):
            math[f"eval/{name}"] = math_tasks.math_eval_set(name, 30, seed=2)
    out["math"] = _plain(math)
    out["prompt"] = math_tasks.prompt_for(math["train/add2/0"][0])
    out["math_sft"] = post_data.math_sft(60, "mixed", 0)
    out["math_preferences"] = _plain(post_data.math_preferences(120, "add2", 0)
                                     + post_data.math_preferences(60, "sub2", 1)
                                     + post_data.math_preferences(60, "mul1", 2))
    out["rg"] = _plain([math_tasks._rg_problem("gsm_symbolic", {
        "question": "Tom has 3 apples and buys 2. How many? Give the result as your final answer. Do not include units.",
        "answer": "5", "metadata": {"answer_cot": "3 + 2 = <<3+2=5>>5\n#### 5"}}),
        math_tasks._rg_problem("chain_sum", {"question": "2 + 3 =", "answer": "5",
                                             "metadata": {"expression": "2 + 3"}})])
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "gsm.jsonl"
        path.write_text(GSM8K, encoding="utf-8")
        out["gsm8k"] = _plain(math_tasks.read_gsm8k(path))
    out["qa_pairs"] = domain_qa.build_pairs([{"doc_id": i, "shard": s, "text": t} for i, s, t in DOCUMENTS])
    out["questions"] = [domain_qa.question_for(h, t, f"doc-{i}", BODY) for h in HEADINGS for t in TITLES
                        for i in range(6)]
    return json.loads(json.dumps(out, ensure_ascii=False))
