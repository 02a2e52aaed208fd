"""A user's own lm-evaluation-harness task on disk, as the evaluation stages and assets
take one: for the harness's tests and the eval assets'."""

from __future__ import annotations

import json
from pathlib import Path


def user_task(root: Path) -> Path:
    """A user's task directory, as for a public benchmark on disk: YAML plus a data file."""
    d = root / "mis_tareas"
    d.mkdir()
    rows = [{"pregunta": f"¿Cuánto es {a} más {b}?", "opciones": [str(a + b), str(a + b + 1), str(a * b)],
             "respuesta": 0} for a, b in [(2, 3), (4, 1), (5, 5), (3, 7), (6, 2), (9, 1)]]
    (d / "sumas.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (d / "sumas.yaml").write_text(
        f"task: sumas_es\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {d / 'sumas.jsonl'}\n"
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: \"{{pregunta}}\"\n"
        "doc_to_choice: \"{{opciones}}\"\ndoc_to_target: respuesta\n"
        "metric_list:\n  - {metric: acc, aggregation: mean, higher_is_better: true}\n", encoding="utf-8")
    return d
