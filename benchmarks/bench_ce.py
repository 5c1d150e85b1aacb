"""One CE cell four ways against the raw encoder limit, in interleaved rounds of one invocation (= ``make bench``).

Every contender trains the same training partition (the framework's sampler picks it) for the same
epochs at the same batch size, from the same encoder, and then evaluates the test split; the data
are tokenised before any clock starts. In each of ``--rounds`` rounds every contender runs once,
in an order rotated from round to round; a figure is the **median over rounds** (min–max printed),
a ratio the median of the ratios within each round.

1. **limit@fp32, limit@bf16** (and **limit@fp16** on a GPU): the encoder + a linear head + CE,
   clipping 1.0 and the fused AdamW — no Lightning, no data loading, no logging — on the
   framework's own batches: its training sampler's batches, epoch by epoch, packed as it packs
   them, and its length-sorted test batches. They are built, and moved to the device, before the
   clock starts; each carries its packing plan and the flat index of its real words, so the timed
   region does no host work at all (``tests/test_bench.py`` counts it with ``tests/host_syncs.py``:
   no tensor -> Python conversion, no operation sized by the data). Eval = the forward passes over
   the whole test split. The limit of a stage is the precision whose median is fastest there —
   measured on the whole split, in every round. **limit@<training precision> sorted** trains the
   same sentences in length-sorted batches, run padded: the least padding any batching gives, a
   reference for what random batches cost (not a ratio's denominator: sorting the training
   batches changes the results, docs/benchmarks.md).
2. **plain**: the loop a researcher writes around transformers' examples (run_ner.py style:
   ``DataCollatorForTokenClassification``, random batches, test in file order).
3. **hf_trainer**: Hugging Face ``Trainer`` with length-grouped batches, same data, epochs, lr,
   batch, warm-up, clipping, weight decay; ``Trainer.predict`` on test.
4. **ner_lightning**: the framework's cell with its defaults (``ner_lightning.cell.protocols.train``):
   train = its ``train`` phase, eval = its ``test`` phase (decoding and span scoring included);
   no dev evaluation.

The plain loop and the Trainer train and evaluate in the framework's precisions. The whole
process runs with the framework's heap setting (``runtime.malloc_top_pad_mb``), its
deterministic-algorithms setting (``trainer.deterministic``) and its tensor-fill setting, set
once before the first round, and what the set-up made is frozen for the garbage collector (as a
cell's process freezes what its imports made), so that no contender runs under settings another
does not.
Throughput = real (non-padding) sub-word tokens / wall seconds of the phase (GPU work waited for
before each clock reading).

Exit status: non-zero when the framework is *faster* than the limit in a stage (then the limit is
wrong, not the framework right) or below ``--min-ratio`` of it.

    python benchmarks/bench_ce.py [--size 100 --epochs 10 --rounds 5] [--out bench.json] [trainer=gpu]
"""
from __future__ import annotations

import argparse
import gc
import inspect
import json
import statistics
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
from ner_lightning.data.batching import shared_sorted_batches, sorted_batches
from ner_lightning.hardware import fill_uninitialized_memory, reserve_heap, uses_gpu
from ner_lightning.models.encoder import TransformerEncoder
from ner_lightning.precision.choice import calibration
from ner_lightning.cell.protocols import train

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_FROM_LIGHTNING = {"32-true": "fp32", "bf16-mixed": "bf16", "16-mixed": "fp16"}
SORTED = " sorted"  # the name suffix of the sorted-batch reference limit
_DETERMINISTIC = {"warn": (True, True), True: (True, False), False: (False, False), None: (False, False)}


def _device(cfg) -> torch.device:
    """The device the framework's cell runs on (``trainer=gpu``: the first GPU); every run here uses it."""
    return torch.device("cuda" if uses_gpu(str(cfg.trainer.accelerator)) else "cpu")


def _precisions(device: torch.device) -> tuple[str, ...]:
    """The precisions of the limit: fp32 and bf16 on a CPU; fp16 too on a GPU."""
    if device.type == "cpu":
        return ("fp32", "bf16")
    return ("fp32", "bf16", "fp16") if torch.cuda.is_bf16_supported() else ("fp32", "fp16")


def _autocast(precision: str, device: torch.device):
    return torch.autocast(device.type, dtype=_DTYPES[precision], enabled=precision != "fp32")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def same_settings(cfg) -> str:
    """The framework's process settings for every contender: heap, deterministic algorithms (Lightning
    sets them process-wide when its Trainer is built, and they stay), the tensor fill under them."""
    heap = reserve_heap(cfg.runtime.malloc_top_pad_mb)
    mode = cfg.trainer.get("deterministic")
    on, warn_only = _DETERMINISTIC[mode]
    torch.use_deterministic_algorithms(on, warn_only=warn_only)
    fill = fill_uninitialized_memory(cfg.runtime.fill_uninitialized_memory)
    return f"{heap}; deterministic algorithms {mode}; {fill}"


# --- the limit -----------------------------------------------------------------------------------
def limit_batch(batch: dict, device: torch.device) -> dict:
    """A collated batch as the limit's timed steps use it: on ``device``, with the flat index of its
    real words in the ``(B, W)`` word grid and their gold labels (made here, on the host), so that a
    step selects them by index — never by a boolean mask, whose result size only the device knows."""
    words = batch["layout"].words
    width = batch["word_mask"].size(1)
    flat = torch.tensor([r * width + j for r, n in enumerate(words) for j in range(n)], dtype=torch.long)
    gold = batch["labels"].gather(1, batch["word_starts"]).flatten()[flat]
    out = {k: batch[k] for k in ("input_ids", "attention_mask", "word_starts", "pack")}
    out.update(flat=flat, gold=gold)
    return move_data_to_device(out, device)


def real_tokens(batches: list[dict]) -> int:
    """Real sub-words of ``batches`` (the plans' sizes: known on the host)."""
    return sum(int(b["pack"].source.numel()) for b in batches)


def train_step(encoder: TransformerEncoder, head, opt, precision: str, b: dict) -> None:
    """One CE step of the bare encoder + a linear head (clipping 1.0, fused AdamW), host-free."""
    with _autocast(precision, b["input_ids"].device):
        hidden = encoder(b["input_ids"], b["attention_mask"], pack=b["pack"])
    logits = head(encoder.word_states(hidden.float(), b["word_starts"])).flatten(0, 1)[b["flat"]]
    torch.nn.functional.cross_entropy(logits, b["gold"]).backward()
    torch.nn.utils.clip_grad_norm_([*encoder.parameters(), *head.parameters()], 1.0)
    opt.step()
    opt.zero_grad()


def eval_step(encoder: TransformerEncoder, b: dict) -> torch.Tensor:
    """The encoder's forward pass of an evaluation batch (packed where the framework would pack it)."""
    return encoder(b["input_ids"], b["attention_mask"], pack=b["pack"])


def framework_epochs(dm, epochs: int) -> list[list[dict]]:
    """The training batches the framework's loader yields in each epoch (its sampler's order for
    that epoch: Lightning sets the epoch on it), collated ahead."""
    loader = dm.train_dataloader()
    sampler = loader.batch_sampler if dm.group_by_length else loader.sampler
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append(list(loader))
    return out


class LimitInputs:
    """What every limit contender shares, built once and on the device before any clock starts: the
    encoder (its initial weights restored before each run), the framework's own training batches
    epoch by epoch, the same sentences in length-sorted batches, and the test batches."""

    def __init__(self, cfg):
        self.cfg, self.device = cfg, _device(cfg)
        self.encoder: TransformerEncoder = instantiate(cfg.model).to(self.device)
        self.initial = {k: v.clone() for k, v in self.encoder.state_dict().items()}
        dm = instantiate(cfg.data, tokenizer=self.encoder.tokenizer)
        dm.setup("fit")
        pad, epochs = self.encoder.tokenizer.pad_token_id, cfg.trainer.max_epochs
        framework = framework_epochs(dm, epochs)
        by_length = sorted_batches(dm.features["train"], cfg.data.batch_size, lambda f: collate_features(f, pad))
        test = shared_sorted_batches(dm.features["test"], cfg.data.eval_batch_size, pad, cfg.data.eval_batch_tokens)
        self.train_epochs = {"framework": [[limit_batch(b, self.device) for b in epoch] for epoch in framework],
                             "sorted": [[limit_batch(b, self.device) for b in by_length]] * epochs}
        self.train_real = {"framework": sum(real_tokens(epoch) for epoch in framework),
                           "sorted": real_tokens(by_length) * epochs}
        self.test_batches = [limit_batch(b, self.device) for b in test]
        self.eval_real = real_tokens(test)
        self.n_labels = len(dm.label_set)


class Limit:
    """The encoder alone on pre-built batches (see the module docstring), at one precision.
    ``batches="framework"``: the framework's own training batches, epoch by epoch, packed as it
    packs them (the limit of the framework's computation); ``"sorted"``: length-sorted batches of
    the same sentences, run padded (the least padding any batching could give; a reference, not a
    ratio's denominator)."""

    def __init__(self, inputs: LimitInputs, precision: str, batches: str = "framework"):
        self.inputs, self.precision, self.batches = inputs, precision, batches
        self.cfg, self.device = inputs.cfg, inputs.device

    def run(self) -> dict:
        """One round: every training epoch from the initial weights, then the test split (not for the
        sorted-batch reference, whose test batches would be the same)."""
        inputs, encoder, device = self.inputs, self.inputs.encoder, self.device
        train_packed = self.batches == "framework" and bool(self.cfg.model.pack)
        for warm_up in (True, False):  # one step outside the clock, then from the initial weights again
            encoder.load_state_dict(inputs.initial)
            encoder.train()
            encoder.pack = train_packed  # without packing, a batch's plan only gives its padding mask
            torch.manual_seed(self.cfg.seed)
            head = torch.nn.Linear(encoder.hidden_size, inputs.n_labels).to(device)
            opt = _fastest_adamw([*encoder.parameters(), *head.parameters()], lr=self.cfg.optimizer.lr)
            if warm_up:
                train_step(encoder, head, opt, self.precision, inputs.train_epochs[self.batches][0][0])
        _sync(device)
        t0 = time.perf_counter()
        for epoch in inputs.train_epochs[self.batches]:
            for b in epoch:
                train_step(encoder, head, opt, self.precision, b)
        _sync(device)
        t1 = time.perf_counter()
        out = {"train_s": t1 - t0, "eval_s": None, "test_f1": None, "train_real_tokens": inputs.train_real[self.batches],
               "eval_real_tokens": inputs.eval_real}
        if self.batches == "sorted":
            return out
        encoder.eval()
        encoder.pack = bool(self.cfg.model.pack)  # evaluation packs where the framework would
        with torch.inference_mode(), _autocast(self.precision, device):
            for b in inputs.test_batches:
                eval_step(encoder, b)
        _sync(device)
        return {**out, "eval_s": time.perf_counter() - t1}


def _fastest_adamw(params, lr: float) -> torch.optim.Optimizer:
    """The fused AdamW kernel where this torch has it for the device, else the default one."""
    params = list(params)
    try:
        return torch.optim.AdamW(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(params, lr=lr)


# --- the plain loop and Hugging Face Trainer -----------------------------------------------------
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


class HFData:
    """The partition and the test split tokenised once, as transformers' examples do, for the plain
    loop and the Trainer; :meth:`model` is a fresh token-classification model each round."""

    def __init__(self, cfg):
        from transformers import AutoTokenizer

        from ner_lightning.data.sampling import sample_partition

        self.cfg = cfg
        corpus = instantiate(cfg.dataset)
        train_sents = sample_partition(corpus.train, cfg.size, cfg.partition, cfg.seed, corpus.name)
        self.labels = corpus.label_set.labels
        self.label2id = {l: i for i, l in enumerate(self.labels)}
        self.tok = AutoTokenizer.from_pretrained(cfg.model.tokenizer or cfg.model.name_or_path)
        self.train_ds = _encode_hf(self.tok, train_sents, self.label2id, cfg.data.max_length)
        self.test_ds = _encode_hf(self.tok, corpus.test, self.label2id, cfg.data.max_length)

    def model(self):
        from transformers import AutoModelForTokenClassification, BertConfig, BertForTokenClassification

        torch.manual_seed(self.cfg.seed)
        labels = {"num_labels": len(self.labels), "id2label": dict(enumerate(self.labels)), "label2id": self.label2id}
        if self.cfg.model.random_init is not None:  # model=tiny: the same random BERT shape
            config = BertConfig(vocab_size=len(self.tok), **OmegaConf.to_container(self.cfg.model.random_init), **labels)
            return BertForTokenClassification(config)
        return AutoModelForTokenClassification.from_pretrained(self.cfg.model.name_or_path, **labels)


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


def run_plain(data: HFData, train_precision: str, eval_precision: str) -> dict:
    """The hand-written loop (a gradient scaler under fp16, as torch's AMP recipe has it)."""
    from transformers import DataCollatorForTokenClassification, get_linear_schedule_with_warmup

    cfg = data.cfg
    device = _device(cfg)
    model = data.model().to(device)
    scaler = torch.amp.GradScaler(device.type, enabled=train_precision == "fp16")
    collator = DataCollatorForTokenClassification(data.tok)
    g = torch.Generator().manual_seed(cfg.seed)
    train_dl = torch.utils.data.DataLoader(data.train_ds, batch_size=cfg.data.batch_size, shuffle=True,
                                           collate_fn=collator, generator=g)
    test_dl = torch.utils.data.DataLoader(data.test_ds, batch_size=cfg.data.eval_batch_size, collate_fn=collator)
    epochs = cfg.trainer.max_epochs
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optimizer.lr, weight_decay=cfg.optimizer.weight_decay)
    total = epochs * len(train_dl)
    sched = get_linear_schedule_with_warmup(opt, int(cfg.loss.warmup_ratio * total), total)
    t0 = time.perf_counter()
    model.train()
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
    _sync(device)
    t1 = time.perf_counter()
    model.eval()
    gold, pred = [], []
    with torch.inference_mode(), _autocast(eval_precision, device):
        for batch in test_dl:
            inputs = move_data_to_device({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}, device)
            gold += batch["labels"].tolist()
            pred += model(**inputs).logits.argmax(-1).tolist()
    f1 = _f1(data.labels, gold, pred)
    t2 = time.perf_counter()
    return {"train_s": t1 - t0, "eval_s": t2 - t1, "test_f1": f1, "train_real_tokens": epochs * _count(data.train_ds),
            "eval_real_tokens": _count(data.test_ds)}


def run_hf_trainer(data: HFData, train_precision: str, eval_precision: str, out_dir: Path) -> dict:
    """Hugging Face ``Trainer`` with length-grouped training batches (``bf16_full_eval`` /
    ``fp16_full_eval`` for a half-precision evaluation after fp32 training)."""
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    cfg = data.cfg
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
    trainer = Trainer(model=data.model(), args=args, train_dataset=data.train_ds,
                      data_collator=DataCollatorForTokenClassification(data.tok))
    t0 = time.perf_counter()
    trainer.train()
    t1 = time.perf_counter()
    out = trainer.predict(data.test_ds)
    f1 = _f1(data.labels, out.label_ids.tolist(), out.predictions.argmax(-1).tolist())
    t2 = time.perf_counter()
    return {"train_s": t1 - t0, "eval_s": t2 - t1, "test_f1": f1, "train_real_tokens": cfg.trainer.max_epochs * _count(data.train_ds),
            "eval_real_tokens": _count(data.test_ds)}


def run_framework(args: argparse.Namespace, out_dir: Path) -> dict:
    """The framework's cell, composed afresh in a folder of its own."""
    res = train(_config(args, out_dir)).to_json()
    tp = res["throughput"]
    return {"train_s": res["phase_s"]["train"] + res["phase_s"]["dev"], "eval_s": res["phase_s"]["test"],
            "test_f1": res["test"]["micro"]["f1"], "train_real_tokens": tp["train_tokens"],
            "eval_real_tokens": tp["eval_tokens"], "train_padding": tp["train_padding_ratio"],
            "eval_padding": tp["eval_padding_ratio"], "precision": res["precision"]}


# --- rounds, medians, verdict --------------------------------------------------------------------
def rounds(contenders: dict, n: int, log=print) -> dict[str, list[dict]]:
    """Each contender once per round, in an order rotated by one each round; every run's figures."""
    names = list(contenders)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(n):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            runs[name].append(contenders[name]())
        log(f"round {r + 1}/{n}: " + ", ".join(f"{name} {runs[name][-1]['train_s']:.2f} + {runs[name][-1]['eval_s'] or 0:.2f} s"
                                              for name in order), flush=True)
    return runs


def summarise(runs: list[dict]) -> dict:
    """Medians over rounds (and the fastest and slowest round) of a contender's runs."""
    out = {}
    for stage in ("train", "eval"):
        seconds = [r[f"{stage}_s"] for r in runs if r[f"{stage}_s"] is not None]
        if not seconds:
            out[f"{stage}_s"], out[f"{stage}_s_range"], out[f"{stage}_tokens_per_s"] = None, None, None
            continue
        tokens = runs[0][f"{stage}_real_tokens"]
        out[f"{stage}_s"] = statistics.median(seconds)
        out[f"{stage}_s_range"] = [min(seconds), max(seconds)]
        out[f"{stage}_tokens_per_s"] = tokens / out[f"{stage}_s"]
    f1 = [r["test_f1"] for r in runs if r.get("test_f1") is not None]
    out["test_f1"] = statistics.median(f1) if f1 else None
    out["precision"] = runs[0].get("precision")
    out["train_padding"], out["eval_padding"] = runs[0].get("train_padding"), runs[0].get("eval_padding")
    return out


def best_limits(rows: dict) -> dict:
    """Per stage, the limit row (on the framework's batches) with the highest median throughput."""
    limits = [name for name in rows if name.startswith("limit@") and not name.endswith(SORTED)]
    return {stage: max(limits, key=lambda n: rows[n][f"{stage}_tokens_per_s"]) for stage in ("train", "eval")}


def ratios(runs: dict[str, list[dict]], best: dict) -> dict:
    """The framework against the limits (throughput) and against the plain loop and the Trainer
    (time), each the median over rounds of the ratio *within* a round: the contenders of a round ran
    minutes apart, so a round's ratio is untouched by the VM speeding up or slowing down between
    rounds, which moves the medians of the seconds themselves."""
    fw = runs["ner_lightning"]

    def rate(run: dict, stage: str) -> float:
        return run[f"{stage}_real_tokens"] / run[f"{stage}_s"]

    def paired(values) -> float:
        return statistics.median(values)

    out = {f"{stage}_vs_limit": paired(rate(f, stage) / rate(l, stage) for f, l in zip(fw, runs[best[stage]]))
           for stage in ("train", "eval")}
    for name in (n for n in runs if n.endswith(SORTED)):
        out["train_vs_sorted_limit"] = paired(rate(f, "train") / rate(l, "train") for f, l in zip(fw, runs[name]))
    for name in ("plain", "hf_trainer"):
        if name in runs:
            out[f"time_vs_{name}"] = paired((f["train_s"] + f["eval_s"]) / (o["train_s"] + o["eval_s"])
                                            for f, o in zip(fw, runs[name]))
    return out


def verdict(ratio: dict, best: dict, min_ratio: float) -> str | None:
    """Why the benchmark fails, or None: the framework faster than the limit — its median ratio over
    1, i.e. faster in most rounds: the limit is wrong — or below ``min_ratio`` of it."""
    faster = [k for k in ("train_vs_limit", "eval_vs_limit") if ratio[k] > 1.0]
    if faster:
        return (f"FAILED: the framework is faster than the limit ({', '.join(f'{k} {ratio[k]:.0%}' for k in faster)}): "
                f"the limit ({best}) does work the framework does not — fix the limit before reading any ratio")
    slow = [k for k in ("train_vs_limit", "eval_vs_limit") if ratio[k] < min_ratio]
    if slow:
        return (f"FAILED: {', '.join(f'{k} {ratio[k]:.0%}' for k in slow)} is below {min_ratio:.0%} of the fastest "
                f"limit ({best}): a precision or throughput regression")
    return None


def _print_rows(rows: dict) -> None:
    def fmt(x, spec):
        return format(x, spec) if x is not None else "-"

    print(f"{'':16}{'train s':>9}{'(min-max)':>14}{'eval s':>8}{'(min-max)':>14}{'train tok/s':>12}{'eval tok/s':>12}"
          f"{'train pad':>10}{'eval pad':>9}{'test F1':>9}")
    def spread(r, stage):
        return "%.2f-%.2f" % tuple(r[f"{stage}_s_range"]) if r[f"{stage}_s_range"] else "-"

    for name, r in rows.items():
        print(f"{name:16}{r['train_s']:9.2f}{spread(r, 'train'):>14}{fmt(r['eval_s'], '8.2f'):>8}{spread(r, 'eval'):>14}"
              f"{r['train_tokens_per_s']:12,.0f}{fmt(r['eval_tokens_per_s'], '12,.0f'):>12}"
              f"{fmt(r['train_padding'], '10.2f'):>10}{fmt(r['eval_padding'], '9.2f'):>9}{fmt(r['test_f1'], '9.4f'):>9}")


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--dataset", default="conll2003")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds; every figure is a median over them")
    ap.add_argument("--skip", default="", help="comma list of plain,hf_trainer to leave out")
    ap.add_argument("--out", default=None, help="write every round's figures and the medians as JSON here")
    ap.add_argument("--min-ratio", type=float, default=0.75, help="exit non-zero when the framework's training or "
                    "evaluation throughput is below this share of the fastest limit")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    return ap.parse_args(argv)


def _config(args: argparse.Namespace, out_dir: Path):
    return compose_config([
        f"dataset={args.dataset}", f"model={args.model}", "loss=ce", f"size={args.size}",
        f"trainer.max_epochs={args.epochs}", f"trainer.min_epochs={args.epochs}", "+trainer.limit_val_batches=0",
        "trainer.enable_checkpointing=false", "trainer.enable_progress_bar=false", "callbacks=none",
        "+callbacks.token_throughput._target_=ner_lightning.callbacks.monitoring.TokenThroughput",
        "+callbacks.eval_precision._target_=ner_lightning.callbacks.monitoring.EvalPrecision",
        "+callbacks.eval_precision.precision='${best_precision:${trainer.accelerator},${model},eval}'",
        "logger=none", *args.overrides,
    ], out_dir)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    out_dir = Path(tempfile.mkdtemp(prefix="bench_ce_"))
    cfg = _config(args, out_dir / "compose")
    chosen = calibration(str(cfg.trainer.accelerator), OmegaConf.to_container(cfg.model, resolve=True))
    settings = same_settings(cfg)
    print(f"# {args.dataset}, {args.model}, size {args.size}, {args.epochs} epochs, batch {cfg.data.batch_size}, "
          f"{torch.get_num_threads()} threads, {args.rounds} rounds; the framework's precision here: training "
          f"{chosen['train']}, evaluation {chosen['eval']} ({chosen['why']}); for every contender: {settings}", flush=True)
    train_p = _FROM_LIGHTNING[cfg.trainer.precision]
    eval_p = _FROM_LIGHTNING[cfg.callbacks.eval_precision.precision]
    inputs = LimitInputs(cfg)
    contenders = {f"limit@{p}": Limit(inputs, p).run for p in _precisions(_device(cfg))}
    contenders[f"limit@{train_p}{SORTED}"] = Limit(inputs, train_p, "sorted").run
    skip = set(args.skip.split(","))
    if not {"plain", "hf_trainer"} <= skip:
        data = HFData(cfg)
        if "plain" not in skip:
            contenders["plain"] = lambda: run_plain(data, train_p, eval_p)
        if "hf_trainer" not in skip:
            contenders["hf_trainer"] = lambda: run_hf_trainer(data, train_p, eval_p, out_dir)
    count = iter(range(10 ** 6))
    contenders["ner_lightning"] = lambda: run_framework(args, out_dir / f"ner_lightning_{next(count)}")
    gc.collect()
    gc.freeze()  # what the set-up made (encoders, data, imports) is never walked by a collection, as in a cell's process
    runs = rounds(contenders, args.rounds)
    rows = {name: summarise(r) for name, r in runs.items()}
    best = best_limits(rows)
    _print_rows(rows)
    ratio = ratios(runs, best)
    fw = rows["ner_lightning"]
    print(f"ner_lightning (training {fw['precision']['train']}, evaluation {fw['precision']['eval']}), medians of the "
          f"{args.rounds} rounds' ratios: train {ratio['train_vs_limit']:.0%} of the limit ({best['train']}), eval "
          f"{ratio['eval_vs_limit']:.0%} of the limit ({best['eval']})"
          + (f"; train {ratio['train_vs_sorted_limit']:.0%} of the sorted-batch reference" if "train_vs_sorted_limit" in ratio else ""))
    for name in ("plain", "hf_trainer"):
        if f"time_vs_{name}" in ratio:
            print(f"time (train + test) ner_lightning / {name}: {ratio[f'time_vs_{name}']:.2f}x")
    failed = verdict(ratio, best, args.min_ratio)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"rows": rows, "runs": runs, "best": best, "ratios": ratio, "settings": settings,
                                              "verdict": failed, "argv": sys.argv}, indent=2, default=str))
    if failed:
        print(failed, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
