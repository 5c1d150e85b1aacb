"""One CE cell four ways, in one invocation, against the raw encoder limit (= ``make bench``).

1. **limit**: the encoder alone at the best precision this machine has, measured here on the
   same sentences in ideal batches (sorted by length: least padding), no Lightning, no data
   loading. Eval = forward passes over the test split in the batches the framework evaluates in;
   train = forward + backward + AdamW step (+ a linear head and CE) over the training partition.
   fp32 and bf16 autocast are both measured (fp16 too on a GPU); "best" is the fastest (bf16 pays
   only with native bf16: AVX-512 BF16 / AMX / GPU).
   Measured before and after the three runs; each figure is the faster of the two, so a slow
   moment of a shared VM during one of them does not flatter the ratios.
2. **plain**: the loop a researcher writes around transformers' examples (run_ner.py style:
   ``DataCollatorForTokenClassification``, random batches, test in file order).
3. **hf_trainer**: Hugging Face ``Trainer`` with length-grouped batches, same data, epochs, lr,
   batch, warm-up, clipping, weight decay; ``Trainer.predict`` on test.
4. **ner_lightning**: the framework's cell with its defaults (training at ``trainer.precision``,
   evaluation at ``callbacks.eval_precision`` = auto, ``data.group_by_length`` as configured),
   no dev evaluation, one test evaluation.

The plain loop and the Trainer train and evaluate at the framework's two precisions, and the
whole process (limits included) runs with the framework's heap setting (``malloc_top_pad_mb``).
Same partition (the framework's sampler picks the sentences for all), encoder, epochs and
batch size everywhere. Throughput = real (non-padding) sub-word tokens / wall seconds of the
phase: train = all epochs incl. data loading and optimiser, eval = the test pass incl.
decoding (and, for the framework, span scoring). Ratios printed at the end.

Everything runs on the framework's device: the CPU, or with ``trainer=gpu`` the first GPU
(GPU work is waited for before each clock reading).

    python benchmarks/bench_ce.py --size 100 --epochs 10 [--out bench.json] [trainer=gpu]
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra.utils import instantiate
from lightning_fabric.utilities.apply_func import move_data_to_device
from omegaconf import OmegaConf

from ner_lightning.config import compose_config
from ner_lightning.data.alignment import collate_features
from ner_lightning.data.datamodule import sorted_batches
from ner_lightning.hardware import reserve_heap, uses_gpu
from ner_lightning.precision import calibration
from ner_lightning.protocols import train
from timing import best_rate  # noqa: E402  (benchmarks/timing.py)


_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_FROM_LIGHTNING = {"32-true": "fp32", "bf16-mixed": "bf16", "16-mixed": "fp16"}


def _device(cfg) -> torch.device:
    """The device the framework's cell runs on (``trainer=gpu``: the first GPU); every run here uses it."""
    return torch.device("cuda" if uses_gpu(str(cfg.trainer.accelerator)) else "cpu")


def _precisions(device: torch.device) -> tuple[str, ...]:
    """The precisions whose limits are measured: fp32 and bf16 on a CPU; fp16 too on a GPU."""
    if device.type == "cpu":
        return ("fp32", "bf16")
    return ("fp32", "bf16", "fp16") if torch.cuda.is_bf16_supported() else ("fp32", "fp16")


def _autocast(precision: str, device: torch.device):
    return torch.autocast(device.type, dtype=_DTYPES[precision], enabled=precision != "fp32")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _sorted_batches(features, batch_size: int, pad_id: int, device: torch.device,
                    max_tokens: int | None = None) -> list[tuple[dict, int]]:
    """Length-sorted batches as the framework evaluates in (``datamodule.sorted_batches``: ``batch_size``
    sentences, or ``max_tokens`` padded sub-words) on ``device``, each with its real sub-word count."""
    batches = sorted_batches(features, batch_size, lambda feats: collate_features(feats, pad_id), max_tokens=max_tokens)
    return [(move_data_to_device(b, device), int(b["attention_mask"].sum())) for b in batches]


def _fastest_adamw(params, lr: float) -> torch.optim.Optimizer:
    """The fused AdamW kernel where this torch has it for the device, else the default one."""
    params = list(params)
    try:
        return torch.optim.AdamW(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(params, lr=lr)


def train_step(encoder, head, opt, precision: str, b: dict) -> None:
    """One CE training step of the bare encoder + a linear head (fused AdamW, clipping 1.0)."""
    with _autocast(precision, b["input_ids"].device):
        hidden = encoder(b["input_ids"], b["attention_mask"])
    logits = head(encoder.word_states(hidden.float(), b["word_starts"]))[b["word_mask"]]
    gold = b["labels"].gather(1, b["word_starts"])[b["word_mask"]]
    torch.nn.functional.cross_entropy(logits, gold).backward()
    torch.nn.utils.clip_grad_norm_(encoder.parameters(), 1.0)
    opt.step()
    opt.zero_grad()


def timed_pass(step, batches: list[tuple[dict, int]]) -> int:
    """``step`` over every batch, waited for (GPU work is asynchronous); returns their real sub-words."""
    for b, _ in batches:
        step(b)
    _sync(b["input_ids"].device)
    return sum(n for _, n in batches)


def forward_pass(encoder, batches: list[tuple[dict, int]]) -> int:
    """The encoder over ``batches`` (no head)."""
    return timed_pass(lambda b: encoder(b["input_ids"], b["attention_mask"]), batches)


def train_pass(encoder, head, opt, precision: str, batches: list[tuple[dict, int]]) -> int:
    """One training pass over ``batches``."""
    return timed_pass(lambda b: train_step(encoder, head, opt, precision, b), batches)


def limits(cfg, max_eval_tokens: int, passes: int = 3) -> dict:
    """Raw encoder tokens/s in ideal batches, per precision: ``{"eval": {fp32, bf16}, "train": …}``.

    Eval: both precisions on every k-th sorted test batch (``max_eval_tokens``), then the
    faster one over the whole test split (what the cells evaluate), which is the limit.
    Train: passes over the sorted training partition per precision, with the fused AdamW.
    Every figure is the fastest of ``passes`` passes, after one warm-up batch."""
    from ner_lightning.models.encoder import TransformerEncoder

    device = _device(cfg)
    encoder: TransformerEncoder = instantiate(cfg.model).to(device)
    dm = instantiate(cfg.data, tokenizer=encoder.tokenizer)
    dm.setup("fit")
    pad = encoder.tokenizer.pad_token_id
    test = _sorted_batches(dm.features["test"], cfg.data.eval_batch_size, pad, device, cfg.data.eval_batch_tokens)
    total = sum(n for _, n in test)
    stride = max(1, -(-total // max_eval_tokens))  # every k-th batch: the whole length range
    eval_batches = test[::stride]
    train_batches = _sorted_batches(dm.features["train"], cfg.data.batch_size, pad, device)
    out = {"eval": {}, "train": {}, "passes": passes, "device": str(device),
           "eval_sample_tokens": sum(n for _, n in eval_batches)}
    state = {k: v.clone() for k, v in encoder.state_dict().items()}

    for precision in _precisions(device):
        encoder.load_state_dict(state)
        encoder.eval()
        with torch.inference_mode(), _autocast(precision, device):
            forward_pass(encoder, eval_batches[:1])  # warm-up
            out["eval"][precision] = best_rate(lambda: forward_pass(encoder, eval_batches), passes)
        encoder.train()
        head = torch.nn.Linear(encoder.hidden_size, len(dm.label_set)).to(device)
        opt = _fastest_adamw([*encoder.parameters(), *head.parameters()], lr=cfg.optimizer.lr)

        train_pass(encoder, head, opt, precision, train_batches[:1])  # warm-up
        out["train"][precision] = best_rate(lambda: train_pass(encoder, head, opt, precision, train_batches), passes)
    best = max(out["eval"], key=out["eval"].get)
    encoder.load_state_dict(state)
    encoder.eval()
    out["eval_sample"] = dict(out["eval"])
    with torch.inference_mode(), _autocast(best, device):
        out["eval"][best] = best_rate(lambda: forward_pass(encoder, test), passes)
    return out


def _print_limits(lim: dict, when: str) -> None:
    best = max(lim["eval_sample"], key=lim["eval_sample"].get)
    print(f"limit eval {when}: " + "  ".join(f"{p} {v:,.0f}" for p, v in lim["eval_sample"].items())
          + f" tok/s on {lim['eval_sample_tokens']:,} test tokens -> best {best}: "
          f"{lim['eval'][best]:,.0f} tok/s on the whole test split", flush=True)
    print(f"limit train {when}: " + "  ".join(f"{p} {v:,.0f} tok/s" for p, v in lim["train"].items()) + " (fused AdamW)",
          flush=True)


def _faster(a: dict, b: dict) -> dict:
    """Each limit figure the faster of two measurements of it (before and after the runs): the
    VM's speed drifts within an invocation, and a limit measured in a slow moment would flatter
    the ratios. ``eval`` holds whole-test-split figures where a measurement has one (for the
    precision it found fastest on the sample; the sample's figure otherwise), as :func:`limits`
    does: the fastest precision on the merged sample figures is always one with a whole-split
    figure, so the eval limit is never a sample's."""
    out = dict(a)
    for key in ("train", "eval_sample"):
        out[key] = {p: max(a[key][p], b[key][p]) for p in a[key]}
    whole = {p: [m["eval"][p] for m in (a, b) if max(m["eval_sample"], key=m["eval_sample"].get) == p] for p in a["eval"]}
    out["eval"] = {p: max(whole[p]) if whole[p] else out["eval_sample"][p] for p in a["eval"]}
    return out


def _encode_hf(tok, sents, label2id, max_length):
    out = []
    for s in sents:
        enc = tok(list(s.tokens), is_split_into_words=True, truncation=True, max_length=max_length)
        prev, lab = None, []
        for wid in enc.word_ids():
            lab.append(-100 if wid is None or wid == prev else label2id[s.tags[wid]])
            prev = wid
        out.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": lab})
    return out


def _hf_setup(cfg):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from ner_lightning.data.sampling import sample_partition

    torch.manual_seed(cfg.seed)
    corpus = instantiate(cfg.dataset)
    train_sents = sample_partition(corpus.train, cfg.size, cfg.partition, cfg.seed, corpus.name)
    labels = corpus.label_set.labels
    label2id = {l: i for i, l in enumerate(labels)}
    tok = AutoTokenizer.from_pretrained(cfg.model.name_or_path)
    model = AutoModelForTokenClassification.from_pretrained(
        cfg.model.name_or_path, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label2id)
    train_ds = _encode_hf(tok, train_sents, label2id, cfg.data.max_length)
    test_ds = _encode_hf(tok, corpus.test, label2id, cfg.data.max_length)
    return tok, model, labels, train_ds, test_ds


def _f1(labels, gold_rows, pred_rows) -> float:
    from ner_lightning.metrics import span_scores

    gold, pred = [], []
    for row_l, row_p in zip(gold_rows, pred_rows):
        keep = [i for i, l in enumerate(row_l) if l != -100]
        gold.append([labels[row_l[i]] for i in keep])
        pred.append([labels[row_p[i]] for i in keep])
    return span_scores(gold, pred)["micro"]["f1"]


def _count(ds) -> int:
    return sum(len(x["input_ids"]) for x in ds)


def run_plain(cfg, train_precision: str, eval_precision: str) -> dict:
    """The hand-written loop: what a researcher writes around transformers' examples (a
    gradient scaler under fp16, as torch's AMP recipe has it)."""
    from transformers import DataCollatorForTokenClassification, get_linear_schedule_with_warmup

    device = _device(cfg)
    tok, model, labels, train_ds, test_ds = _hf_setup(cfg)
    model.to(device)
    scaler = torch.amp.GradScaler(device.type, enabled=train_precision == "fp16")
    collator = DataCollatorForTokenClassification(tok)
    g = torch.Generator().manual_seed(cfg.seed)
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=cfg.data.batch_size, shuffle=True,
                                           collate_fn=collator, generator=g)
    test_dl = torch.utils.data.DataLoader(test_ds, batch_size=cfg.data.eval_batch_size, collate_fn=collator)
    epochs = cfg.trainer.max_epochs
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optimizer.lr, weight_decay=cfg.optimizer.weight_decay)
    total = epochs * len(train_dl)
    sched = get_linear_schedule_with_warmup(opt, int(cfg.loss.warmup_ratio * total), total)
    t0 = time.perf_counter()
    model.train()
    padded = 0
    for _ in range(epochs):
        for batch in train_dl:
            with _autocast(train_precision, device):
                loss = model(**move_data_to_device(batch, device)).loss
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.gradient_clip_val)
            scaler.step(opt)
            scaler.update()
            sched.step()
            opt.zero_grad()
            padded += batch["attention_mask"].numel()
    _sync(device)
    t1 = time.perf_counter()
    model.eval()
    gold, pred, eval_padded = [], [], 0
    with torch.inference_mode(), _autocast(eval_precision, device):
        for batch in test_dl:
            inputs = move_data_to_device({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}, device)
            best = model(**inputs).logits.argmax(-1)
            gold += batch["labels"].tolist()
            pred += best.tolist()
            eval_padded += batch["attention_mask"].numel()
    f1 = _f1(labels, gold, pred)
    t2 = time.perf_counter()
    n_train, n_eval = epochs * _count(train_ds), _count(test_ds)
    return {"train_s": t1 - t0, "eval_s": t2 - t1, "test_f1": f1, "train_real_tokens": n_train,
            "eval_real_tokens": n_eval, "train_padding": padded / n_train, "eval_padding": eval_padded / n_eval}


def run_hf_trainer(cfg, train_precision: str, eval_precision: str, out_dir: Path) -> dict:
    """Hugging Face ``Trainer`` with length-grouped training batches (``bf16_full_eval`` /
    ``fp16_full_eval`` for a half-precision evaluation after fp32 training)."""
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    tok, model, labels, train_ds, test_ds = _hf_setup(cfg)
    params = inspect.signature(TrainingArguments).parameters
    renamed = "train_sampling_strategy" in params  # transformers 5 renamed these
    grouping = {"train_sampling_strategy": "group_by_length"} if renamed else {"group_by_length": True}
    warmup = {"warmup_steps": float(cfg.loss.warmup_ratio)} if renamed else {"warmup_ratio": cfg.loss.warmup_ratio}
    args = TrainingArguments(
        output_dir=str(out_dir / "hf_trainer"), per_device_train_batch_size=cfg.data.batch_size,
        per_device_eval_batch_size=cfg.data.eval_batch_size, num_train_epochs=cfg.trainer.max_epochs,
        learning_rate=cfg.optimizer.lr, weight_decay=cfg.optimizer.weight_decay,
        max_grad_norm=cfg.trainer.gradient_clip_val, lr_scheduler_type="linear", bf16=train_precision == "bf16",
        fp16=train_precision == "fp16", bf16_full_eval=eval_precision == "bf16" and train_precision == "fp32",
        fp16_full_eval=eval_precision == "fp16" and train_precision == "fp32",
        save_strategy="no", eval_strategy="no", logging_strategy="no", report_to=[], disable_tqdm=True,
        seed=cfg.seed, dataloader_num_workers=0, use_cpu=_device(cfg).type == "cpu", **grouping, **warmup)
    trainer = Trainer(model=model, args=args, train_dataset=train_ds, data_collator=DataCollatorForTokenClassification(tok))
    t0 = time.perf_counter()
    trainer.train()
    t1 = time.perf_counter()
    out = trainer.predict(test_ds)
    pred = out.predictions.argmax(-1).tolist()
    f1 = _f1(labels, out.label_ids.tolist(), pred)
    t2 = time.perf_counter()
    return {"train_s": t1 - t0, "eval_s": t2 - t1, "test_f1": f1, "train_real_tokens": cfg.trainer.max_epochs * _count(train_ds),
            "eval_real_tokens": _count(test_ds), "train_padding": None, "eval_padding": None}


def run_framework(cfg) -> dict:
    res = train(cfg).to_json()
    tp = res["throughput"]
    return {"train_s": res["phase_s"]["fit"], "eval_s": res["phase_s"]["test"], "test_f1": res["test"]["micro"]["f1"],
            "train_real_tokens": tp["train_tokens"], "eval_real_tokens": tp["eval_tokens"],
            "train_padding": tp["train_padding_ratio"], "eval_padding": tp["eval_padding_ratio"],
            "precision": res["precision"]}


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--dataset", default="conll2003")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--limit-tokens", type=int, default=20000, help="test tokens the eval limit is measured on")
    ap.add_argument("--limit-passes", type=int, default=3, help="timed passes per limit; the fastest counts")
    ap.add_argument("--skip", default="", help="comma list of plain,hf_trainer to leave out")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    ap.add_argument("--min-ratio", type=float, default=0.75, help="exit non-zero when the framework's training or "
                    "evaluation throughput is below this share of the fastest measured limit")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    return ap.parse_args()


def _config(args: argparse.Namespace, out_dir: Path):
    return compose_config([
        f"dataset={args.dataset}", f"model={args.model}", "loss=ce", f"size={args.size}",
        f"trainer.max_epochs={args.epochs}", "+trainer.limit_val_batches=0", "trainer.enable_checkpointing=false",
        "trainer.enable_progress_bar=false", "callbacks=none",
        "+callbacks.token_throughput._target_=ner_lightning.callbacks.monitoring.TokenThroughput",
        "+callbacks.eval_precision._target_=ner_lightning.callbacks.monitoring.EvalPrecision",
        "+callbacks.eval_precision.precision='${best_precision:${trainer.accelerator},${model},eval}'",
        "logger=none", *args.overrides,
    ], out_dir)


def _print_rows(rows: dict) -> None:
    def fmt(x, spec):
        return format(x, spec) if x is not None else "-"

    for r in rows.values():
        r["train_tokens_per_s"] = r["train_real_tokens"] / r["train_s"]
        r["eval_tokens_per_s"] = r["eval_real_tokens"] / r["eval_s"]
    print(f"{'':14}{'train s':>9}{'eval s':>8}{'train tok/s':>12}{'eval tok/s':>12}{'train pad':>10}{'eval pad':>9}{'test F1':>9}")
    for name, r in rows.items():
        print(f"{name:14}{r['train_s']:9.1f}{r['eval_s']:8.1f}{r['train_tokens_per_s']:12,.0f}{r['eval_tokens_per_s']:12,.0f}"
              f"{fmt(r['train_padding'], '10.2f'):>10}{fmt(r['eval_padding'], '9.2f'):>9}{r['test_f1']:9.4f}")


def _ratios(rows: dict, lim: dict, best: dict) -> dict:
    """The framework against the limits and against the plain loop and HF Trainer (printed)."""
    fw = rows["ner_lightning"]
    ratios = {"train_vs_limit": fw["train_tokens_per_s"] / lim["train"][best["train"]],
              "eval_vs_limit": fw["eval_tokens_per_s"] / lim["eval"][best["eval"]]}
    for name in ("plain", "hf_trainer"):
        if name in rows:
            ratios[f"time_vs_{name}"] = (fw["train_s"] + fw["eval_s"]) / (rows[name]["train_s"] + rows[name]["eval_s"])
    print(f"ner_lightning (training {fw['precision']['train']}, evaluation {fw['precision']['eval']}): train "
          f"{ratios['train_vs_limit']:.0%} of the {best['train']} limit, eval {ratios['eval_vs_limit']:.0%} of the "
          f"{best['eval']} limit")
    for name in ("plain", "hf_trainer"):
        if f"time_vs_{name}" in ratios:
            print(f"time (train + test) ner_lightning / {name}: {ratios[f'time_vs_{name}']:.2f}x")
    return ratios


def main() -> None:
    args = _arguments()
    out_dir = Path(tempfile.mkdtemp(prefix="bench_ce_"))
    cfg = _config(args, out_dir)
    chosen = calibration(str(cfg.trainer.accelerator), OmegaConf.to_container(cfg.model, resolve=True))
    heap = reserve_heap(cfg.runtime.malloc_top_pad_mb)  # the process's: limits, plain loop and Trainer get it too
    print(f"# {args.dataset}, {args.model}, size {args.size}, {args.epochs} epochs, batch {cfg.data.batch_size}, "
          f"{torch.get_num_threads()} threads; the framework's precision here: training {chosen['train']}, "
          f"evaluation {chosen['eval']} ({chosen['why']}); {heap}", flush=True)
    first = limits(cfg, args.limit_tokens, args.limit_passes)
    _print_limits(first, "before the runs")
    train_p = _FROM_LIGHTNING[cfg.trainer.precision]
    eval_p = _FROM_LIGHTNING[cfg.callbacks.eval_precision.precision]
    rows = {}
    if "plain" not in args.skip:
        rows["plain"] = run_plain(cfg, train_p, eval_p)
        print("plain loop done", flush=True)
    if "hf_trainer" not in args.skip:
        rows["hf_trainer"] = run_hf_trainer(cfg, train_p, eval_p, out_dir)
        print("HF Trainer done", flush=True)
    rows["ner_lightning"] = run_framework(cfg)
    again = limits(cfg, args.limit_tokens, args.limit_passes)
    _print_limits(again, "after the runs")
    lim = _faster(first, again)
    best = {"eval": max(lim["eval_sample"], key=lim["eval_sample"].get), "train": max(lim["train"], key=lim["train"].get)}
    print(f"limits: the faster of the two measurements -> train {best['train']} {lim['train'][best['train']]:,.0f} tok/s, "
          f"eval {best['eval']} {lim['eval'][best['eval']]:,.0f} tok/s on the whole test split", flush=True)
    _print_rows(rows)
    ratios = _ratios(rows, lim, best)
    if args.out:
        Path(args.out).write_text(json.dumps({"limits": lim, "limits_measured": [first, again], "best": best, "rows": rows,
                                              "ratios": ratios, "argv": sys.argv}, indent=2))
    slow = [k for k in ("train_vs_limit", "eval_vs_limit") if ratios[k] < args.min_ratio]
    if slow:
        fw = rows["ner_lightning"]
        sys.exit(f"FAILED: {', '.join(f'{k} {ratios[k]:.0%}' for k in slow)} is below {args.min_ratio:.0%} of the fastest "
                 f"measured limit (training ran {fw['precision']['train']}, evaluation {fw['precision']['eval']}; the "
                 f"fastest: train {best['train']}, eval {best['eval']}): a precision or throughput regression")


if __name__ == "__main__":
    main()
