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


def test_best_precision_resolver_follows_the_hardware(flags, tmp_path):
    from ner_lightning.config import compose_config

    flags("avx2")
    assert compose_config(["trainer.precision=${best_precision:cpu}"], tmp_path).trainer.precision == "32-true"
    flags("avx512_bf16")
    assert compose_config(["trainer.precision=${best_precision:cpu}"], tmp_path).trainer.precision == "bf16-mixed"
    assert compose_config([], tmp_path).trainer.precision == "32-true"  # training default: fp32 everywhere


def _spy_linear_dtypes(monkeypatch) -> dict:
    """Record the dtype every Linear layer outputs, per (training or eval, encoder or head)."""
    import torch

    from ner_lightning.models.base import NERModule

    seen: dict = {}
    original = NERModule.word_states

    def word_states(self, batch):
        if not getattr(self, "_spied", False):
            inside = {id(m) for m in self.encoder.modules()}
            for m in self.modules():
                if isinstance(m, torch.nn.Linear):
                    where = "encoder" if id(m) in inside else "head"
                    m.register_forward_hook(lambda m, i, out, where=where: seen.setdefault(
                        ("train" if m.training else "eval", where), set()).add(out.dtype))
            self._spied = True
        return original(self, batch)

    monkeypatch.setattr(NERModule, "word_states", word_states)
    return seen


@pytest.mark.parametrize("cpu", ["avx2", "avx512_bf16"])
def test_eval_precision_auto_uses_bf16_for_evaluation_only_where_native(cpu, flags, toy_cfg, monkeypatch):
    import torch

    from ner_lightning.run import train

    flags(cpu)
    seen = _spy_linear_dtypes(monkeypatch)
    results = train(toy_cfg("trainer.max_epochs=1"))
    evaluation = torch.bfloat16 if cpu == "avx512_bf16" else torch.float32
    assert seen == {("train", "encoder"): {torch.float32}, ("train", "head"): {torch.float32},
                    ("eval", "encoder"): {evaluation}, ("eval", "head"): {torch.float32}}
    assert results["precision"] == {"train": "32-true",
                                    "eval": "bf16-mixed" if cpu == "avx512_bf16" else "32-true"}


def test_eval_precision_rejects_unknown_names(toy_cfg):
    from ner_lightning.run import train

    with pytest.raises(Exception, match="callbacks.eval_precision.precision must be one of"):
        train(toy_cfg("callbacks.eval_precision.precision=fp8"))


@pytest.mark.parametrize("loss", ["ce", "crf", "auc2t", "ova_auc"])
def test_mixed_precision_runs_the_encoder_in_bf16_and_everything_after_it_in_fp32(loss, toy_cfg, monkeypatch):
    """Under trainer.precision=bf16-mixed the encoder's matrix products are bf16 while every
    head, loss and decoder works in fp32 (a CRF's log-sum-exp in bf16 loses the score)."""
    import torch

    from ner_lightning.run import train

    seen = _spy_linear_dtypes(monkeypatch)
    results = train(toy_cfg(f"loss={loss}", "trainer.precision=bf16-mixed", "callbacks.eval_precision.precision=bf16-mixed",
                            "trainer.max_epochs=1"))
    assert seen == {("train", "encoder"): {torch.bfloat16}, ("train", "head"): {torch.float32},
                    ("eval", "encoder"): {torch.bfloat16}, ("eval", "head"): {torch.float32}}
    assert results["test"]["micro"]["support"] > 0
    assert results["precision"] == {"train": "bf16-mixed", "eval": "bf16-mixed"}


def test_fused_adamw_only_in_full_precision(tmp_path):
    """Lightning refuses gradient clipping with a fused optimizer under mixed precision."""
    from ner_lightning.config import compose_config

    assert compose_config([], tmp_path).optimizer.fused is True
    assert compose_config(["trainer.precision=bf16-mixed"], tmp_path).optimizer.fused is False
    assert compose_config(["trainer.precision=16-mixed"], tmp_path).optimizer.fused is False
