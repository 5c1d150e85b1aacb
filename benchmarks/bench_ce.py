"""One CE cell through ner_lightning vs a minimal transformers/PyTorch loop doing the same work.

Same sentences (the framework's partition), encoder, epochs, batch size, AdamW + linear
warm-up/decay, gradient clipping, and one full test evaluation scored with seqeval. No dev
evaluation in either. Throughput = real (non-padding) sub-word tokens / wall seconds of the
phase (train = all epochs incl. data loading; eval = the test pass). The plain loop follows
Hugging Face's run_ner.py: tokenise with ``is_split_into_words``, DataCollatorForTokenClassification,
random training batches, test batches in file order.

    python benchmarks/bench_ce.py --size 100 --epochs 10
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from ner_lightning.config import compose_config
from ner_lightning.run import train


def run_framework(cfg) -> dict:
    res = train(cfg)
    tp = res["throughput"]
    return {
        "train_s": res["phase_s"]["fit"], "eval_s": res["phase_s"]["test"],
        "test_f1": res["test"]["micro"]["f1"],
        "train_real_tokens": tp["train_tokens"], "eval_real_tokens": tp["eval_tokens"],
        "train_padding": tp["train_padding_ratio"], "eval_padding": tp["eval_padding_ratio"],
    }


def run_plain(cfg) -> dict:
    """The hand-written loop: what a researcher writes around transformers' examples."""
    from hydra.utils import instantiate
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2
    from transformers import (AutoModelForTokenClassification, AutoTokenizer,
                              DataCollatorForTokenClassification, get_linear_schedule_with_warmup)

    from ner_lightning.data.sampling import sample_partition

    torch.manual_seed(cfg.seed)
    corpus = instantiate(cfg.dataset)
    train_sents = sample_partition(corpus.train, cfg.size, cfg.partition, cfg.seed, corpus.name)
    labels = corpus.label_set.labels
    label2id = {l: i for i, l in enumerate(labels)}
    path = cfg.model.name_or_path
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForTokenClassification.from_pretrained(
        path, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label2id)

    def encode(sents):
        out = []
        for s in sents:
            enc = tok(list(s.tokens), is_split_into_words=True, truncation=True, max_length=cfg.data.max_length)
            prev, lab = None, []
            for wid in enc.word_ids():
                lab.append(-100 if wid is None or wid == prev else label2id[s.tags[wid]])
                prev = wid
            out.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": lab})
        return out

    collator = DataCollatorForTokenClassification(tok)
    train_ds, test_ds = encode(train_sents), encode(corpus.test)
    g = torch.Generator().manual_seed(cfg.seed)
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=cfg.data.batch_size, shuffle=True,
                                           collate_fn=collator, generator=g)
    test_dl = torch.utils.data.DataLoader(test_ds, batch_size=cfg.data.eval_batch_size, collate_fn=collator)
    epochs = cfg.trainer.max_epochs
    head = list(model.classifier.parameters())  # trained from scratch: head_lr, as in the framework
    body = [p for p in model.parameters() if all(p is not h for h in head)]
    groups = [{"params": body}, {"params": head, "lr": cfg.head_lr or cfg.optimizer.lr}]
    opt = torch.optim.AdamW(groups, lr=cfg.optimizer.lr, weight_decay=cfg.optimizer.weight_decay)
    total = epochs * len(train_dl)
    sched = get_linear_schedule_with_warmup(opt, int(cfg.loss.warmup_ratio * total), total)

    t0 = time.perf_counter()
    model.train()
    n_train = n_train_pad = 0
    for _ in range(epochs):
        for batch in train_dl:
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.gradient_clip_val)
            opt.step()
            sched.step()
            opt.zero_grad()
            n_train += int(batch["attention_mask"].sum())
            n_train_pad += batch["attention_mask"].numel()
    t1 = time.perf_counter()
    model.eval()
    gold, pred = [], []
    n_eval = n_eval_pad = 0
    with torch.inference_mode():
        for batch in test_dl:
            best = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.argmax(-1)
            for row_l, row_p in zip(batch["labels"], best):
                keep = row_l != -100
                gold.append([labels[i] for i in row_l[keep].tolist()])
                pred.append([labels[i] for i in row_p[keep].tolist()])
            n_eval += int(batch["attention_mask"].sum())
            n_eval_pad += batch["attention_mask"].numel()
        f1 = f1_score(gold, pred, mode="strict", scheme=IOB2)
    t2 = time.perf_counter()
    return {"train_s": round(t1 - t0, 2), "eval_s": round(t2 - t1, 2), "test_f1": f1,
            "train_real_tokens": n_train, "eval_real_tokens": n_eval,
            "train_padding": round(n_train_pad / n_train, 3), "eval_padding": round(n_eval_pad / n_eval, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--dataset", default="conll2003")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    args = ap.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    out_dir = Path(tempfile.mkdtemp(prefix="bench_ce_"))
    cfg = compose_config([
        f"dataset={args.dataset}", f"model={args.model}", "loss=ce", f"size={args.size}",
        f"trainer.max_epochs={args.epochs}", "+trainer.limit_val_batches=0", "trainer.enable_checkpointing=false", "trainer.enable_progress_bar=false",
        "callbacks=none", "+callbacks.token_throughput._target_=ner_lightning.callbacks.TokenThroughput",
        "logger=none", *args.overrides,
    ], out_dir)

    print(f"# {args.dataset}, {args.model}, size {args.size}, {args.epochs} epochs, "
          f"batch {cfg.data.batch_size}, {torch.get_num_threads()} threads", flush=True)
    plain = run_plain(cfg)
    print("plain loop done", flush=True)
    frame = run_framework(cfg)
    rows = {}
    for name, r in (("plain", plain), ("ner_lightning", frame)):
        rows[name] = dict(r, train_tokens_per_s=r["train_real_tokens"] / r["train_s"],
                          eval_tokens_per_s=r["eval_real_tokens"] / r["eval_s"])
    print(f"{'':14}{'train tok/s':>12}{'eval tok/s':>12}{'train pad':>10}{'eval pad':>10}{'test F1':>9}")
    for name, r in rows.items():
        print(f"{name:14}{r['train_tokens_per_s']:12.0f}{r['eval_tokens_per_s']:12.0f}"
              f"{r['train_padding']:10.2f}{r['eval_padding']:10.2f}{r['test_f1']:9.4f}")
    ratio = {k: rows["ner_lightning"][k] / rows["plain"][k] for k in ("train_tokens_per_s", "eval_tokens_per_s")}
    print(f"ratio ner_lightning/plain: train {ratio['train_tokens_per_s']:.2f}  eval {ratio['eval_tokens_per_s']:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "ratio": ratio, "argv": sys.argv}, indent=2))


if __name__ == "__main__":
    main()
