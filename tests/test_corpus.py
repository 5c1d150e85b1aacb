import pytest

from ner_lightning.data.column_files import CorpusFormatError
from ner_lightning.data.corpus import (
    LabelSet, carve_dev, iob1_to_iob2, load_corpus, read_conll, split_tag,
)
from tests.conftest import TOY_SENTENCES, write_conll2003, write_tsv

TYPES = ["LOC", "MISC", "ORG", "PER"]


def test_conll2003_layout_skips_docstart_and_keeps_last_column(tmp_path):
    path = write_conll2003(tmp_path / "a.txt", TOY_SENTENCES[:2])
    sents = read_conll(path, delimiter=" ", entity_types=TYPES)
    assert [s.id for s in sents] == ["train:0", "train:1"]
    assert sents[0].tokens == ("Maria", "Lopez", "flew", "to", "Oslo", ".")
    assert sents[0].tags == ("B-PER", "I-PER", "O", "O", "B-LOC", "O")


@pytest.mark.parametrize("extra_cols", [0, 2])  # 2-column TSV and AnEM's 4-column TSV
def test_tsv_layouts(tmp_path, extra_cols):
    path = write_tsv(tmp_path / "a.tsv", TOY_SENTENCES[:3], extra_cols=extra_cols)
    sents = read_conll(path, delimiter="\t", split="test")
    assert len(sents) == 3 and sents[2].id == "test:2"
    assert sents[1].tokens[1:3] == ("Quartz", "Bakery") and sents[1].tags[1:3] == ("B-ORG", "I-ORG")


def test_multiple_docstarts_do_not_make_empty_sentences(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("-DOCSTART- -X- -X- O\n\nA NN O B-PER\n\n-DOCSTART- -X- -X- O\n\nB NN O O\nC NN O B-LOC\n\n")
    sents = read_conll(p, delimiter=" ")
    assert [s.tokens for s in sents] == [("A",), ("B", "C")]


@pytest.mark.parametrize(
    "body, message",
    [
        ("A\tO\nB\tO\tX\n", "3 columns"),
        ("A\tO\nB\tB-PERSON\n", "unknown entity type 'PERSON'"),
        ("A\tO\nB\tE-PER\n", "is not O, B-<type> or I-<type>"),
        ("A\tO\nB\tB-\n", "is not O"),
        ("A\tO\n\tO\n", "empty token"),
        ("A O\n", "at least 2 columns"),
    ],
)
def test_malformed_lines_name_file_line_and_content(tmp_path, body, message):
    p = tmp_path / "bad.tsv"
    p.write_text(body)
    with pytest.raises(CorpusFormatError) as err:
        read_conll(p, delimiter="\t", entity_types=TYPES)
    text = str(err.value)
    assert message in text and str(p) in text
    bad_line = len(body.rstrip("\n").split("\n"))
    assert f"{p}:{bad_line}:" in text


def test_missing_file_says_where_and_how(tmp_path):
    with pytest.raises(FileNotFoundError, match="paths.data_dir"):
        read_conll(tmp_path / "nope.tsv")
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "absent")):
        load_corpus("x", str(tmp_path / "absent"), {"train": "a", "dev": "b", "test": "c"}, TYPES)


def test_iob1_to_iob2_hand_worked():
    iob1 = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG", "O", "B-MISC"]
    assert iob1_to_iob2(iob1) == ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG", "O", "B-MISC"]
    iob2 = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]
    assert iob1_to_iob2(iob2) == iob2


def test_reader_converts_iob1_when_asked(tmp_path):
    p = tmp_path / "a.tsv"
    p.write_text("Ann\tI-PER\nmet\tO\nBo\tI-PER\nCy\tB-PER\n")
    assert read_conll(p, tag_scheme="iob1")[0].tags == ("B-PER", "O", "B-PER", "B-PER")
    with pytest.raises(CorpusFormatError, match=r"a.tsv:1: .*'I-PER' follows O or starts a sentence.*tag_scheme: iob1"):
        read_conll(p, tag_scheme="iob2")


def test_iob2_reader_rejects_an_entity_continuing_nothing_and_names_its_line(tmp_path):
    p = tmp_path / "b.tsv"
    p.write_text("Ann\tB-PER\nSmith\tI-PER\n\nin\tO\nParis\tI-LOC\n")
    with pytest.raises(CorpusFormatError, match=r"b.tsv:5: .*'I-LOC' follows O"):
        read_conll(p)
    p.write_text("Ann\tB-PER\nParis\tI-LOC\n")
    with pytest.raises(CorpusFormatError, match=r"b.tsv:2: .*follows a PER token"):
        read_conll(p)


def test_non_utf8_file_names_its_line(tmp_path):
    p = tmp_path / "c.tsv"
    p.write_bytes("Ann\tB-PER\n\nK\xf6ln\tB-LOC\n".encode("latin-1"))
    with pytest.raises(CorpusFormatError, match=r"c.tsv:3: not UTF-8 \(byte 0xf6 at column 2\)"):
        read_conll(p)


def test_split_tag_allows_hyphenated_types():
    assert split_tag("B-creative-work") == ("B", "creative-work")
    assert split_tag("O") == ("O", None)


def test_label_set_ids():
    ls = LabelSet(["LOC", "PER"])
    assert ls.labels == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert ls.label2id["I-PER"] == 4 and ls.id2label[0] == "O" and len(ls) == 5


def test_carve_dev_is_deterministic_and_disjoint(tmp_path):
    p = write_tsv(tmp_path / "a.tsv", TOY_SENTENCES * 5)
    train = read_conll(p)
    rest1, dev1 = carve_dev(train, 0.1, seed=13)
    rest2, dev2 = carve_dev(train, 0.1, seed=13)
    assert [s.id for s in dev1] == [s.id for s in dev2] and len(dev1) == 4
    assert not {s.id for s in dev1} & {s.id for s in rest1}
    assert len(rest1) + len(dev1) == len(train)
    assert [s.id for s in carve_dev(train, 0.1, seed=14)[1]] != [s.id for s in dev1]


def test_hf_export_writes_a_layout_the_reader_accepts(tmp_path):
    from ner_lightning.data.hf_export import write_split

    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    rows = [{"tokens": ["Ann", "Lee", "visits", "Oslo"], "ner_tags": [1, 2, 0, 3]}, {"tokens": [], "ner_tags": []}]
    p = tmp_path / "train.txt"
    assert write_split(rows, names, p, delimiter=" ") == 1
    (s,) = read_conll(p, delimiter=" ", entity_types=["PER", "LOC"])
    assert s.tokens == ("Ann", "Lee", "visits", "Oslo") and s.tags == ("B-PER", "I-PER", "O", "B-LOC")
