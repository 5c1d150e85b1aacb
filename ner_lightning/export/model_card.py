"""The model card of an exported cell: ``README.md`` in the Hugging Face model-card form (a YAML
header with ``model-index`` scores, then what the model is, how it was trained and scored, and
how to use and share it), filled from the cell's ``results.json``."""

from __future__ import annotations

import shlex

import yaml

from ner_lightning.results import typed_fields

SCORER = "seqeval span scores (ner_lightning.metrics): strict = IOB2 mode, lenient = conlleval rules"


def _scores(split: dict | None, prefix: str) -> list[dict]:
    if not split:
        return []
    return [
        {"type": "f1", "name": f"{prefix} strict micro F1", "value": round(split["micro"]["f1"], 4)},
        {
            "type": "precision",
            "name": f"{prefix} strict micro precision",
            "value": round(split["micro"]["precision"], 4),
        },
        {"type": "recall", "name": f"{prefix} strict micro recall", "value": round(split["micro"]["recall"], 4)},
        {"type": "f1", "name": f"{prefix} lenient micro F1", "value": round(split["lenient"]["micro"]["f1"], 4)},
    ]


def header(result: dict, meta: dict) -> dict:
    """The card's YAML header: tags, the dataset, and the dev and test scores as ``model-index``."""
    dataset = result["partition"]["dataset"]
    head: dict = {
        "tags": ["ner_lightning", "token-classification", "named-entity-recognition"],
        "datasets": [dataset],
        "metrics": ["f1", "precision", "recall"],
    }
    if meta["pipeline"]["available"]:
        head = {"library_name": "transformers", "pipeline_tag": "token-classification", **head}
    results = [
        {
            "task": {"type": "token-classification", "name": "Named Entity Recognition"},
            "dataset": {"name": dataset, "type": dataset, "split": split},
            "metrics": _scores(result[split], split),
        }
        for split in ("dev", "test")
        if result.get(split)
    ]
    head["model-index"] = [{"name": _title(result), "results": results}]
    return head


def _title(result: dict) -> str:
    p = result["partition"]
    return f"{p['dataset']}-{result['objective'].rsplit('.', 1)[-1]}-size{p['size']}-p{p['partition']}"


def _line(split: dict | None) -> str:
    if not split:
        return "not evaluated"
    m = split["micro"]
    return (
        f"strict P {m['precision']:.4f} R {m['recall']:.4f} F1 {m['f1']:.4f} "
        f"(support {m['support']}); lenient F1 {split['lenient']['micro']['f1']:.4f}"
    )


def model_card(result: dict, meta: dict, labels: list[str]) -> str:
    """The card's text (``README.md``); ``meta``: the export's ``model.json``."""
    result = typed_fields(result)
    p, code, token_loss = result["partition"], result.get("code") or {}, result["token_loss"]
    objective = result["objective"] + (f" with {token_loss}" if token_loss else "")
    commit = f"{code.get('commit') or 'unknown'}{' (uncommitted changes)' if code.get('dirty') else ''}"
    choice = (result.get("grid") or {}).get("model")  # the conf/model option, when chosen by name
    rows = [
        ("encoder", f"{choice} (`{result['encoder']}`)" if choice else f"`{result['encoder']}`"),
        ("objective", f"`{objective}`"),
        ("corpus", f"{p['dataset']}: {p['size']} training sentences, partition {p['partition']}, seed {p['seed']}"),
        ("training sentences (sha256)", f"`{p['sha256']}`"),
        ("labels", ", ".join(labels)),
        ("selected", f"epoch {result.get('best_epoch')} by {result.get('monitor')} = {result.get('dev_monitor')}"),
        ("dev", _line(result.get("dev"))),
        ("test", _line(result.get("test"))),
        ("scorer", SCORER),
        ("precision", f"training {result['precision']['train']}, evaluation {result['precision']['eval']}"),
        ("code", f"ner_lightning at commit {commit}"),
        ("reproduce", f"`python -m ner_lightning.run {shlex.join(result['overrides'])}`"),
    ]
    if meta["pipeline"]["available"]:
        use = (
            "```python\nfrom transformers import pipeline\n"
            'tagger = pipeline("token-classification", model="<this folder>", aggregation_strategy="first")\n'
            'tagger("John Smith flew to Paris .")\n```\n\n'
            '`aggregation_strategy="first"`: a word takes its first sub-word\'s label, the rule the model was '
            "trained with. Or, with ner_lightning installed: `python -m ner_lightning.predict <this folder> INPUT`."
        )
    else:
        use = (
            f"Not loadable by `transformers.pipeline`: {meta['pipeline']['why']}.\n\n"
            "`python -m ner_lightning.predict <this folder> INPUT` (ner_lightning installed) tags raw text "
            "(one sentence per line) or a CoNLL file."
        )
    body = "\n".join(
        [
            f"# {_title(result)}",
            "",
            "A named entity recogniser trained with ner_lightning (low-resource NER experiments).",
            "",
            "| | |",
            "|---|---|",
            *(f"| {k} | {v} |" for k, v in rows),
            "",
            "## Use",
            "",
            use,
            "",
            "## Share",
            "",
            "`huggingface-cli upload <user>/<model name> <this folder>` (after `huggingface-cli login`).",
            "",
        ]
    )
    return "---\n" + yaml.safe_dump(header(result, meta), sort_keys=False) + "---\n\n" + body
