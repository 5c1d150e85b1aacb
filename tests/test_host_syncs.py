"""Neither evaluation nor training waits for the device per batch or per word: the tensor ->
Python conversions a whole cell makes (``tests/host_syncs.py``; on a GPU each one waits for the
queued work) do not grow with the number of evaluation batches or of training steps, for every
objective family and a multi-corpus scheme."""
from pathlib import Path

import pytest

from tests.conftest import GENE, TOY_SENTENCES, write_conll2003, write_tsv
from tests.helpers import train
from tests.host_syncs import count_conversions

TAGGING = ["ce", "wce1", "wce2", "focal", "dice", "dice_eq6", "mom", "crf", "bilstm_crf"]
TWO_TASK = ["ce2t", "auc2t", "comauc2t"]
OVA = ["ova_bce", "ova_auc", "ova_auc_maml"]
MRC = ["mrc", "mrc_focal", "mrc_dice", "mrc_mom", "mrc_pointer"]
MULTI = ["munch_conc"]


@pytest.fixture
def cell(tmp_path, toy_cfg):
    """A one-epoch cell on a toy corpus whose dev split holds 32 sentences; returns its
    conversions by place (``file:line name``)."""
    data = tmp_path / "data"
    for name in ("toy", "bc2gm"):
        (data / name).mkdir(parents=True, exist_ok=True)
    write_conll2003(data / "toy" / "train.txt", TOY_SENTENCES * 3)
    write_conll2003(data / "toy" / "dev.txt", TOY_SENTENCES * 4)
    write_conll2003(data / "toy" / "test.txt", TOY_SENTENCES[4:])
    for split in ("train", "dev", "test"):
        write_tsv(data / "bc2gm" / f"{split}.tsv", GENE * 4)

    def run(family: str, size: int, dev_size: int):
        import collections

        extra = [f"loss={family}"]
        if family == "mrc_pointer":
            extra = ["loss=mrc", "loss.head=pointer"]
        if family in MULTI:
            extra = ["loss=ce", f"multitask={family}", "aux=[bc2gm]", "aux_size=4"]
        if family in TWO_TASK:
            extra.append("data.label_scheme=untyped")
        cfg = toy_cfg(f"paths.data_dir={data}", *extra, f"size={size}", f"data.dev_size={dev_size}",
                      "data.batch_size=2", "data.eval_batch_size=2", "trainer.max_epochs=1")
        where = collections.Counter()
        with count_conversions(where):
            result = train(cfg)
        assert result["status"] == "ok"
        return where
    return run


def _grown(small, large) -> dict:
    return {k: large[k] - small[k] for k in large.keys() | small.keys() if large[k] != small[k]}


FAST = {"ce", "bilstm_crf", "auc2t", "ova_auc_maml", "mrc_pointer", "munch_conc"}  # one per family in test-fast


@pytest.mark.parametrize("family", [f if f in FAST else pytest.param(f, marks=pytest.mark.slow)
                                    for f in TAGGING + TWO_TASK + OVA + MRC + MULTI])
def test_conversions_do_not_grow_with_evaluation_batches_or_training_steps(cell, family):
    base = cell(family, size=8, dev_size=8)  # 4 training steps, 4 dev batches of 2
    more_dev = cell(family, size=8, dev_size=32)  # 16 dev batches, 4x the words
    more_steps = cell(family, size=24, dev_size=8)  # 12 training steps
    assert sum(base.values()) > 0  # the counter sees the conversions made once per epoch
    assert _grown(base, more_dev) == {}
    grown = _grown(base, more_steps)
    if family == "ova_auc_maml":
        # Algorithm 2 draws each step's labels from a CPU generator (torch.randperm): one
        # conversion of a host tensor per step, no wait for the device.
        source = (Path(__file__).parents[1] / "ner_lightning/models/one_vs_all.py").read_text().splitlines()
        line = next(i for i, text in enumerate(source, 1) if "torch.randperm(" in text and ".tolist()" in text)
        assert grown == {f"models/one_vs_all.py:{line} tolist": 8}
    else:
        assert grown == {}
