"""`yunque generate | chat | eval | export | lineage`: use a checkpoint directly, without Dagster."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _chosen(path: str):
    """What `--checkpoint` names: a step directory, as given; a training asset's directory
    (data/base_model), the checkpoint its materialization recorded, which every stage
    downstream uses (the best one, when early stopping kept an earlier step), not simply
    the newest on disk; a directory of checkpoints without a record, its newest intact
    one. Says which, on stderr (stdout is the command's output)."""
    from model.checkpoint.files import PREFIX, all_checkpoints
    from stages.training.lineage import RECORD_FILE
    from stages.training.selection import recorded_checkpoint

    p = Path(path)
    if not p.is_dir() or p.name.startswith(PREFIX):
        return path
    if (p / RECORD_FILE).exists():
        _, found = recorded_checkpoint(p, p.name)
        last = all_checkpoints(p)[-1].step if all_checkpoints(p) else found.step
        why = (f"its best, by validation loss; the run went on to step {last}" if found.step < last
               else "its last")
        print(f"{p}: step {found.step}, the checkpoint {p.name} materialized ({why}); "
              f"another step: --checkpoint {p}/{PREFIX}N", file=sys.stderr)
        return found
    if all_checkpoints(p):
        from model.checkpoint.load import resolve

        newest = resolve(p)  # a run never materialized to its end, or a training output from elsewhere
        print(f"{p}: no {RECORD_FILE} (a run not materialized to its end): step {newest.step}, the newest intact "
              f"checkpoint, which no stage has used; another step: --checkpoint {p}/{PREFIX}N", file=sys.stderr)
        return newest
    return path


def _load(path: str, int8: bool = False):
    from model.checkpoint.load import LoadError, load
    from stages.training.lineage import LineageError

    try:
        loaded = load(_chosen(path))
    except (LoadError, LineageError, FileNotFoundError, ValueError) as e:
        raise SystemExit(f"yunque: cannot use checkpoint {path}: {e}") from None
    if int8:
        from model.export.quantize import quantize_int8

        quantize_int8(loaded.model)
    return loaded


def _sampling(args: argparse.Namespace, tok):
    from model.core.generate import Sampling

    return Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                    top_p=args.top_p, stop=tok.stop_ids, seed=args.seed)


def _max_new(loaded, wanted: int) -> int:
    """At most half the context: the prompt (or the conversation) keeps the other half."""
    cap = max(1, loaded.config.context // 2)
    if wanted > cap:
        print(f"(--max-new-tokens {wanted} lowered to {cap}, half the model's context of "
              f"{loaded.config.context}, to leave room for the prompt)", file=sys.stderr)
    return max(1, min(wanted, cap))


def cmd_generate(args: argparse.Namespace) -> int:
    from model.core.generate import generate

    loaded = _load(args.checkpoint, args.int8)
    tok = loaded.tokenizer
    args.max_new_tokens = _max_new(loaded, args.max_new_tokens)
    prompt = tok.encode_chat([{"role": "user", "content": args.prompt}]) if args.chat else tok.encode(args.prompt)
    if not prompt:
        prompt = [tok.eot_id]  # an empty prompt: continue from the start of a document
    out = generate(loaded.model, [prompt], _sampling(args, tok), pad_id=tok.eot_id)[0]
    print(tok.decode(out))
    return 0


def _stream_reply(loaded, ids: list[int], sampling) -> list[int]:
    """Print the reply as it is produced; multi-byte characters are printed once whole."""
    from model.core.generate import generate

    tok, out, shown = loaded.tokenizer, [], ""

    def emit(_row: int, token: int) -> None:
        nonlocal shown
        out.append(token)
        text = tok.decode(out)
        if not text.endswith("\ufffd"):  # not in the middle of a UTF-8 sequence
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown = text

    try:
        generate(loaded.model, [ids], sampling, pad_id=tok.eot_id, on_token=emit)
    except KeyboardInterrupt:  # Ctrl-C stops this reply, not the session
        sys.stdout.write(tok.decode(out)[len(shown):] + " (interrupted)\n")
        return out
    sys.stdout.write(tok.decode(out)[len(shown):] + "\n")
    return out


def cmd_chat(args: argparse.Namespace) -> int:
    from model.core.chat import fit_history

    loaded = _load(args.checkpoint, args.int8)
    tok = loaded.tokenizer
    args.max_new_tokens = _max_new(loaded, args.max_new_tokens)
    sampling = _sampling(args, tok)
    history = [{"role": "system", "content": args.system}] if args.system else []
    print(f"chatting with {loaded.checkpoint.path} (step {loaded.checkpoint.step}, "
          f"{loaded.config.num_params() / 1e6:.1f}M parameters, context {loaded.config.context}); "
          "/reset clears the conversation, /exit or Ctrl-D ends it", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 0
        if line.strip() in ("/exit", "/quit"):
            return 0
        if line.strip() == "/reset":
            history = history[:1] if args.system else []
            continue
        if not line.strip():
            continue
        history.append({"role": "user", "content": line})
        history, dropped = fit_history(tok, history, loaded.config.context - sampling.max_new_tokens)
        if dropped:
            print(f"(the conversation outgrew the context of {loaded.config.context} tokens: "
                  f"the oldest {dropped} message(s) are forgotten)", file=sys.stderr)
        reply = _stream_reply(loaded, tok.encode_chat(history), sampling)
        history.append({"role": "assistant", "content": tok.decode(reply)})


def _language(args: argparse.Namespace) -> str:
    """The language `yunque eval` asks in: --language, else the home's, else Spanish."""
    from stages.store import home as home_settings
    from yunque import env
    from yunque.cli import language as cli_language

    given = args.language or cli_language.named(home_settings.read(env.home_url()).overrides)
    return cli_language.resolve(given)[0] if given else "es"


def cmd_eval(args: argparse.Namespace) -> int:
    from model.infer.evaluate import evaluate_loaded
    from stages.config import preset

    cfg = preset(args.preset).eval
    if args.problems:
        cfg.math_problems = args.problems
    loaded = _load(args.checkpoint)
    progress = None if args.json else (lambda msg: print(msg, file=sys.stderr))
    try:
        language = _language(args)
        row = evaluate_loaded(loaded, cfg, gsm8k=args.gsm8k, progress=progress, language=language)
        if args.harness:
            row["harness"] = _harness(loaded, args, progress, language)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"yunque eval: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(row, ensure_ascii=False))
        return 0
    from stages.evaluation.report import build, markdown

    print(markdown(build({"checkpoint": row}, {}, cfg.overfit_window, cfg.repetition_threshold)))
    return 0


def _harness(loaded, args: argparse.Namespace, progress, language: str = "es") -> dict:
    """lm-evaluation-harness on the checkpoint's transformers export, offline: the shipped
    task of the corpus' language (yunque_es_qa, yunque_fr_qa) made from the home's held-out
    domain QA pairs, and the tasks of the --harness-include directories."""
    import tempfile

    from stages.data.decontamination import eval_pairs
    from stages.evaluation import harness
    from stages.store.outputs import DataStore
    from yunque import env

    tasks = [t for t in args.harness.split(",") if t]
    include = [Path(d) for d in args.harness_include]
    with tempfile.TemporaryDirectory(prefix="yunque-harness-tasks.") as scratch:
        if harness.shipped_asked(tasks, language):
            store = DataStore(env.home_url())
            pairs = eval_pairs(store, language)
            if not pairs:
                raise ValueError(f"{harness.shipped(language)}: no held-out domain QA pairs in the home "
                                 f"{env.home_url()} (materialize token_shards, or pass --home)")
            include.append(harness.write_shipped_task(pairs, Path(scratch), language))
        if progress:
            progress(f"lm-evaluation-harness: {', '.join(tasks)} (offline)")
        return harness.on_checkpoint(loaded.checkpoint.path, tasks, include, args.harness_limit)


def cmd_export(args: argparse.Namespace) -> int:
    from model.export.hf import export_hf
    from yunque.cli.lineage import export_lineage

    loaded = _load(args.checkpoint)
    types = [t for t in args.gguf_types.split(",") if t] if args.gguf else []
    try:
        # a recorded checkpoint's chain travels with the export (`yunque lineage OUT`)
        record = export_hf(loaded, Path(args.out), args.dtype, types, lineage=export_lineage(loaded.checkpoint.path))
    except (OSError, ValueError) as e:
        raise SystemExit(f"yunque export: {e}") from None
    for name, size in record["files"].items():
        print(f"{args.out}/{name}: {size / 1e6:.1f} MB")
    print(f"transformers: AutoModelForCausalLM.from_pretrained({args.out!r})"
          + (f"; llama.cpp: llama-cli -m {args.out}/model-{types[0]}.gguf" if types else ""))
    return 0


def add_commands(sub) -> None:
    from yunque.cli.config import add_preset_argument
    from yunque.cli.lineage import add_command as add_lineage

    checkpoint_help = ("a step-NNNNNNNN directory, or a training asset's (e.g. .yunque/data/base_model): the "
                       "checkpoint it materialized, the best under early stopping")

    def sampling_args(p, tokens: int, temperature: float) -> None:
        p.add_argument("--checkpoint", required=True, help=checkpoint_help)
        p.add_argument("--max-new-tokens", type=int, default=tokens)
        p.add_argument("--temperature", type=float, default=temperature, help="0 is greedy")
        p.add_argument("--top-k", type=int, default=50)
        p.add_argument("--top-p", type=float, default=0.95)
        p.add_argument("--seed", type=int, default=None)
        p.add_argument("--int8", action="store_true",
                       help="int8 weights (CPU): about a third of the memory, faster on memory-bound CPUs")

    g = sub.add_parser("generate", help="continue a prompt (prints only the continuation)")
    sampling_args(g, 128, 0.0)
    g.add_argument("--prompt", required=True)
    g.add_argument("--chat", action="store_true", help="wrap the prompt as a user turn of the chat template")
    g.set_defaults(fn=cmd_generate)
    c = sub.add_parser("chat", help="talk to a checkpoint (streamed, history kept)")
    sampling_args(c, 128, 0.7)
    c.add_argument("--system", help="a system message to start the conversation with")
    c.set_defaults(fn=cmd_chat)
    e = sub.add_parser("eval", help="the evaluation report's row for one checkpoint")
    e.add_argument("--checkpoint", required=True, help=checkpoint_help)
    e.add_argument("--gsm8k", help="a GSM8K-format jsonl (question, answer ending in '#### N') to score")
    e.add_argument("--problems", type=int, help="held-out generated problems (default: the preset's)")
    add_preset_argument(e, "evaluation settings of this preset", refused_at_parse=True)
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument("--language", metavar="CODE", help="the language of the math problems, their instruction and the "
                                                      "shipped harness task (default: the home's, else es)")
    e.add_argument("--harness", default="", help="comma-separated lm-evaluation-harness tasks, run offline on the "
                                                 "checkpoint's transformers export (yunque_es_qa, yunque_fr_qa, ...: "
                                                 "the shipped task in the corpus' language, from the home's held-out "
                                                 "domain QA pairs)")
    e.add_argument("--harness-include", action="append", default=[],
                   help="a directory of harness task YAML with local data files (repeatable)")
    e.add_argument("--harness-limit", type=int, default=0, help="items per harness task (default: all)")
    e.set_defaults(fn=cmd_eval)
    x = sub.add_parser("export", help="write a Hugging Face directory (and GGUF files)")
    x.add_argument("--checkpoint", required=True, help=checkpoint_help)
    x.add_argument("--out", required=True)
    x.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    x.add_argument("--gguf", action="store_true", help="also GGUF files for llama.cpp (see --gguf-types)")
    x.add_argument("--gguf-types", default="f16,q8_0,q4_0", help="comma-separated GGUF types (default: all three)")
    x.set_defaults(fn=cmd_export)
    add_lineage(sub)
