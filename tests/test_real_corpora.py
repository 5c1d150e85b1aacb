"""Every dataset config reads its real corpus; counts match ../shared/datasets/README.md."""
import pytest
from hydra.utils import instantiate

from tests.conftest import compose_config

# (sentences train/dev/test, tokens train/dev/test) from the datasets README.
EXPECTED = {
    "conll2003": ((14041, 3250, 3453), (203621, 51362, 46435)),
    "wnut17": ((3394, 1009, 1287), (62730, 15733, 23394)),
    "ncbi_disease": ((5424, 923, 940), (135701, 23969, 24497)),
    "linnaeus": ((11935, 4078, 7142), (280960, 93815, 164653)),
    "bc5cdr_chem": ((4560, 4581, 4797), (118170, 117453, 124750)),
    "bc5cdr_disease": ((4560, 4581, 4797), (118170, 117453, 124750)),
    "bc2gm": ((12574, 2519, 5038), (355405, 71042, 143465)),
    "anatem": ((5861, 2118, 3830), (153823, 58785, 99976)),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dataset_config_reads_real_corpus(name, requires_real_data, tmp_path):
    cfg = compose_config([f"dataset={name}", f"paths.data_dir={requires_real_data}"], tmp_path)
    corpus = instantiate(cfg.dataset)
    sents, toks = EXPECTED[name]
    splits = (corpus.train, corpus.dev, corpus.test)
    assert tuple(len(s) for s in splits) == sents
    assert tuple(sum(len(x) for x in s) for s in splits) == toks


def test_anem_dev_is_carved_from_train(requires_real_data, tmp_path):
    cfg = compose_config(["dataset=anem", f"paths.data_dir={requires_real_data}"], tmp_path)
    corpus = instantiate(cfg.dataset)
    assert len(corpus.train) + len(corpus.dev) == 2815 and len(corpus.test) == 1882
    assert len(corpus.dev) == 282 and all(s.id.startswith("train:") for s in corpus.dev)
    assert corpus.notes and "no dev split" in corpus.notes[0]
    assert sum(len(s) for s in corpus.train + corpus.dev) == 71697
