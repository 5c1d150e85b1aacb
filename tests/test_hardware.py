"""trainer.precision: auto picks bf16 only where the hardware multiplies bf16 natively."""
import pytest

from ner_lightning import hardware


@pytest.fixture
def flags(monkeypatch):
    def set_flags(*names):
        monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset(names))
        monkeypatch.setattr(hardware, "_uses_gpu", lambda accelerator: False)

    return set_flags


def test_cpu_with_avx512_bf16_or_amx_gets_bf16(flags):
    flags("avx2", "avx512f", "avx512_bf16")
    assert hardware.precision_choice("cpu") == ("bf16-mixed", "the CPU has avx512_bf16")
    flags("amx_bf16", "amx_tile")
    assert hardware.best_precision("auto") == "bf16-mixed"


def test_cpu_without_native_bf16_stays_fp32(flags):
    flags("avx", "avx2", "avx512f")  # AVX-512 without its BF16 extension: emulated, slower
    best, why = hardware.precision_choice("cpu")
    assert best == "32-true" and "no native bf16" in why


def test_config_default_resolves_through_the_hardware(flags, tmp_path):
    from ner_lightning.config import compose_config

    flags("avx2")
    assert compose_config([], tmp_path).trainer.precision == "32-true"
    flags("avx512_bf16")
    assert compose_config([], tmp_path).trainer.precision == "bf16-mixed"
    assert compose_config(["trainer.precision=32-true"], tmp_path).trainer.precision == "32-true"


def test_precision_line_says_auto_or_pinned(flags, tmp_path):
    from ner_lightning.config import compose_config
    from ner_lightning.run import _precision_line

    flags("avx2")
    assert _precision_line(compose_config([], tmp_path)).startswith("precision 32-true (auto: the CPU has no")
    line = _precision_line(compose_config(["trainer.precision=bf16-mixed"], tmp_path))
    assert line.startswith("precision bf16-mixed (set in the config; auto would pick 32-true")


@pytest.mark.parametrize("loss", ["ce", "crf", "auc2t", "ova_auc"])
def test_mixed_precision_runs_the_encoder_in_bf16_and_everything_after_it_in_fp32(loss, toy_cfg):
    """Under trainer.precision=bf16-mixed the encoder's matrix products are bf16 while the word
    states every head, loss and decoder sees are fp32 (a CRF's log-sum-exp in bf16 loses the score)."""
    import torch

    from ner_lightning.models.base import NERModule
    from ner_lightning.run import train

    seen = {"encoder": set(), "head": set()}
    original = NERModule.word_states

    def word_states(self, batch):
        """The dtype every Linear layer outputs: the encoder's, and the heads' after it."""
        if not getattr(self, "_spied", False):
            inside = {id(m) for m in self.encoder.modules()}
            for m in self.modules():
                if isinstance(m, torch.nn.Linear):
                    where = "encoder" if id(m) in inside else "head"
                    m.register_forward_hook(lambda m, i, out, where=where: seen[where].add(out.dtype))
            self._spied = True
        return original(self, batch)

    patch = pytest.MonkeyPatch()
    patch.setattr(NERModule, "word_states", word_states)
    try:
        results = train(toy_cfg(f"loss={loss}", "trainer.precision=bf16-mixed", "trainer.max_epochs=1"))
    finally:
        patch.undo()
    assert seen == {"encoder": {torch.bfloat16}, "head": {torch.float32}}
    assert results["test"]["micro"]["support"] > 0 and results["config"]["trainer"]["precision"] == "bf16-mixed"
