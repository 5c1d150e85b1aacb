"""trainer.precision: auto picks bf16 only where the hardware multiplies bf16 natively."""
import pytest

from ner_lightning import hardware

READ_CPU_FLAGS = hardware.cpu_flags  # the real reader (an autouse fixture replaces hardware.cpu_flags)


@pytest.fixture
def flags(monkeypatch):
    def set_flags(*names):
        monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset(names))
        monkeypatch.setattr(hardware, "uses_gpu", lambda accelerator: False)

    return set_flags


def test_cpu_with_avx512_bf16_or_amx_gets_bf16(flags):
    from ner_lightning.precision import choice as precision

    flags("avx2", "avx512f", "avx512_bf16")
    assert precision.flags_choice("cpu") == ("bf16-mixed", "the CPU has avx512_bf16")
    flags("amx_bf16", "amx_tile")
    assert precision.best_precision("auto") == "bf16-mixed"


def test_cpu_without_native_bf16_stays_fp32(flags):
    from ner_lightning.precision import choice as precision

    flags("avx", "avx2", "avx512f")  # AVX-512 without its BF16 extension: emulated, slower
    best, why = precision.flags_choice("cpu")
    assert best == "32-true" and "no native bf16" in why


def test_best_precision_resolver_follows_the_hardware(flags, tmp_path):
    from ner_lightning.config import compose_config

    flags("avx2")
    assert compose_config(["trainer.precision=${best_precision:cpu}"], tmp_path).trainer.precision == "32-true"
    flags("avx512_bf16")
    assert compose_config(["trainer.precision=${best_precision:cpu}"], tmp_path).trainer.precision == "bf16-mixed"
    flags("avx2")  # the default measures, and measures nothing where the flags rule bf16 out
    assert compose_config([], tmp_path).trainer.precision == "32-true"


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

    from ner_lightning.precision import choice as precision
    from tests.helpers import train

    flags(cpu)
    monkeypatch.setattr(precision, "machine_load", lambda: (0.0, 2))
    monkeypatch.setattr(precision, "measure_rounds", lambda model, names, device: {  # bf16 measured 2x faster
        "rates": {name: {"train": [100.0] * precision.ROUNDS, "eval": [100.0 if name == "32-true" else 200.0] * 5}
                  for name in names}, "cpu_share": 1.0})
    seen = _spy_linear_dtypes(monkeypatch)
    results = train(toy_cfg("trainer.max_epochs=1"))
    evaluation = torch.bfloat16 if cpu == "avx512_bf16" else torch.float32
    assert seen == {("train", "encoder"): {torch.float32}, ("train", "head"): {torch.float32},
                    ("eval", "encoder"): {evaluation}, ("eval", "head"): {torch.float32}}
    assert {k: results["precision"][k] for k in ("train", "eval")} == {
        "train": "32-true", "eval": "bf16-mixed" if cpu == "avx512_bf16" else "32-true"}


def test_eval_precision_rejects_unknown_names(toy_cfg):
    from tests.helpers import train

    with pytest.raises(Exception, match="callbacks.eval_precision.precision must be one of"):
        train(toy_cfg("callbacks.eval_precision.precision=fp8"))


@pytest.mark.parametrize("loss", ["ce", "crf", "auc2t", "ova_auc"])
def test_mixed_precision_runs_the_encoder_in_bf16_and_everything_after_it_in_fp32(loss, toy_cfg, monkeypatch):
    """Under trainer.precision=bf16-mixed the encoder's matrix products are bf16 while every
    head, loss and decoder works in fp32 (a CRF's log-sum-exp in bf16 loses the score)."""
    import torch

    from tests.helpers import train

    seen = _spy_linear_dtypes(monkeypatch)
    results = train(toy_cfg(f"loss={loss}", "trainer.precision=bf16-mixed", "callbacks.eval_precision.precision=bf16-mixed",
                            "trainer.max_epochs=1"))
    assert seen == {("train", "encoder"): {torch.bfloat16}, ("train", "head"): {torch.float32},
                    ("eval", "encoder"): {torch.bfloat16}, ("eval", "head"): {torch.float32}}
    assert results["test"]["micro"]["support"] > 0
    assert results["precision"]["train"] == results["precision"]["eval"] == "bf16-mixed"


def test_fused_adamw_except_under_fp16_loss_scaling(tmp_path):
    """fp16 loss scaling unscales gradients before clipping, which a fused optimizer cannot
    leave to Lightning; fp32 and bf16 (no scaler) get the fused kernel."""
    from ner_lightning.config import compose_config

    assert compose_config(["trainer.precision=32-true"], tmp_path).optimizer.fused is True
    assert compose_config(["trainer.precision=bf16-mixed"], tmp_path).optimizer.fused is True
    assert compose_config(["trainer.precision=16-mixed"], tmp_path).optimizer.fused is False


def test_bf16_training_clips_the_gradients_of_the_fused_adamw(toy_cfg, monkeypatch):
    """Lightning's own bf16-mixed plugin raises here ("does not allow for gradient clipping");
    :class:`precision.plugin.BF16Mixed` clips as in fp32."""
    import torch

    from tests.helpers import train

    norms = []
    clip = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        total = clip(parameters, max_norm, *args, **kwargs)
        norms.append((float(total), float(torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in parameters if p.grad is not None]))), max_norm))
        return total

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    fused = []
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, _step=torch.optim.AdamW.step, **k: (
        fused.append(self.defaults["fused"]), _step(self, *a, **k))[1])
    results = train(toy_cfg("trainer.precision=bf16-mixed", "trainer.gradient_clip_val=1e-3", "trainer.max_epochs=1"))
    assert results["precision"]["train"] == "bf16-mixed"
    assert fused and all(fused)
    assert norms and all(after <= max_norm * 1.01 < before for before, after, max_norm in norms)


def test_trainer_precision_passes_other_names_through():
    from ner_lightning.precision.plugin import BF16Mixed, trainer_precision

    assert trainer_precision("32-true", "cpu") == {"precision": "32-true", "plugins": None}
    assert trainer_precision("16-mixed", "cpu") == {"precision": "16-mixed", "plugins": None}
    args = trainer_precision("bf16-mixed", "cpu")
    assert args["precision"] is None and [type(p) for p in args["plugins"]] == [BF16Mixed]


class FakeLibc:
    def __init__(self, answer=1):
        self.calls, self.answer = [], answer

    def mallopt(self, option, value):
        self.calls.append((option, value))
        return self.answer


def test_reserve_heap_sets_glibc_thresholds_and_pad_in_bytes(monkeypatch):
    libc = FakeLibc()
    monkeypatch.setattr(hardware, "_glibc", lambda: libc)
    assert "keeps 1024 MiB" in hardware.reserve_heap(1024)
    # glibc's <malloc.h>: M_TRIM_THRESHOLD -1, M_TOP_PAD -2, M_MMAP_THRESHOLD -3 (at most 32 MiB on 64-bit)
    expected = [(-3, 33554432), (-1, 1073741824), (-2, 1073741824)]
    assert libc.calls == expected
    assert "glibc's defaults" in hardware.reserve_heap(0) and "glibc's defaults" in hardware.reserve_heap(None)
    assert libc.calls == expected  # 0 / null: mallopt is not called


def test_reserve_heap_reports_refusals_and_other_c_libraries(monkeypatch):
    monkeypatch.setattr(hardware, "_glibc", lambda: FakeLibc(answer=0))
    assert "refused" in hardware.reserve_heap(64)
    monkeypatch.setattr(hardware, "_glibc", lambda: None)
    assert "has no effect" in hardware.reserve_heap(64)


@pytest.mark.parametrize("mb", [-1, 2048, 100000])
def test_reserve_heap_rejects_sizes_a_c_int_cannot_hold(mb, toy_cfg):
    with pytest.raises(ValueError, match="malloc_top_pad_mb"):
        hardware.reserve_heap(mb)
    from tests.helpers import train

    with pytest.raises(ValueError, match=f"runtime.malloc_top_pad_mb={mb}"):  # before anything is loaded
        train(toy_cfg(f"runtime.malloc_top_pad_mb={mb}"))


@pytest.mark.skipif(hardware._glibc() is None, reason="glibc only")
def test_reserve_heap_is_accepted_by_this_glibc(tmp_path):
    from ner_lightning.config import compose_config

    default = compose_config([], tmp_path).runtime.malloc_top_pad_mb
    assert default == 1024
    assert hardware.reserve_heap(default) == "malloc: glibc keeps 1024 MiB of freed heap (runtime.malloc_top_pad_mb)"


@pytest.fixture
def restore_fill():
    import torch.utils.deterministic

    before = torch.utils.deterministic.fill_uninitialized_memory
    yield
    torch.utils.deterministic.fill_uninitialized_memory = before


def test_fill_uninitialized_memory_sets_torchs_flag_and_rejects_non_booleans(restore_fill):
    import torch

    was = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # as trainer.deterministic: warn
    try:
        assert "not pre-filled" in hardware.fill_uninitialized_memory(False)
        assert torch.utils.deterministic.fill_uninitialized_memory is False
        assert "NaN" in hardware.fill_uninitialized_memory(True)
        assert torch.empty(64).isnan().all()  # torch's guard, on again
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
    for bad in ("no", 0, None):
        with pytest.raises(ValueError, match="fill_uninitialized_memory"):
            hardware.fill_uninitialized_memory(bad)


def test_a_cell_applies_fill_uninitialized_memory_from_its_config(toy_cfg, restore_fill, tmp_path):
    import torch.utils.deterministic

    from ner_lightning.config import compose_config
    from tests.helpers import train

    assert compose_config([], tmp_path / "default").runtime.fill_uninitialized_memory is False  # the default
    torch.utils.deterministic.fill_uninitialized_memory = True
    train(toy_cfg("trainer.max_epochs=1"))
    assert torch.utils.deterministic.fill_uninitialized_memory is False
    train(toy_cfg("trainer.max_epochs=1", "runtime.fill_uninitialized_memory=true"))
    assert torch.utils.deterministic.fill_uninitialized_memory is True


def test_cpu_flags_are_read_from_cpuinfo_as_linux_writes_it(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx512f avx512_bf16\n\n"
                    "processor\t: 1\nflags\t\t: fpu sse2 avx512f avx512_bf16\nbugs\t\t: sysret_ss_attrs\n")
    assert READ_CPU_FLAGS(info) == {"fpu", "sse2", "avx512f", "avx512_bf16"}
    (tmp_path / "noflags").write_text("processor\t: 0\nmodel name\t: some ARM\n")
    assert READ_CPU_FLAGS(tmp_path / "noflags") == frozenset()
    assert READ_CPU_FLAGS(tmp_path / "missing") == frozenset()


def test_cpu_flags_of_this_machine_agree_with_lscpu():
    """The real reader on this machine against an independent tool: ``lscpu``'s Flags line."""
    import platform
    import shutil
    import subprocess

    if platform.system() != "Linux" or shutil.which("lscpu") is None:
        pytest.skip("needs Linux and lscpu")
    out = subprocess.run(["lscpu"], capture_output=True, text=True, env={"LC_ALL": "C"}).stdout
    line = next((l for l in out.splitlines() if l.startswith("Flags:")), None)
    if line is None:
        pytest.skip("lscpu lists no Flags here")
    assert READ_CPU_FLAGS() == frozenset(line.split(":", 1)[1].split())
