"""Device slots of parallel jobs (``hydra/launcher=parallel``, joblib/loky workers).

loky reuses worker processes, and CUDA cannot be re-pointed once a process initialised it
(``CUDA_VISIBLE_DEVICES`` set after ``import torch`` does nothing). So a device belongs to a
*worker process*, not to a job: the first job in a worker claims a free slot — an exclusive
``flock`` on ``<sweep dir>/.slots/slot<k>.lock``, held for the process's life and released by
the OS when it dies — and every later job in that worker uses the same slot. With ``n_jobs``
workers alive at most, the slots in use are distinct, so with G GPUs and ``n_jobs`` ≤ G no GPU
runs more jobs than another. Slot k runs on GPU k mod G: with ``cells_per_gpu`` = c and
``n_jobs`` = G x c (the default), every GPU runs c cells at once, each in its own process and
CUDA context; each job gets ``cores // n_jobs`` torch threads (host work of 8 cells on a 16-core
GPU machine at 16 threads each would contend for every core).
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

log = logging.getLogger("ner_lightning")

_claimed: dict[str, tuple[int, object]] = {}  # lock dir -> (slot, open lock file) of this process


def claim_slot(lock_dir: str | Path, n_slots: int) -> int:
    """This process's slot in ``lock_dir`` (the same on every call); the first free one of
    ``n_slots`` on the first call. Raises if all are held by other live processes."""
    key = str(Path(lock_dir).resolve())
    if key in _claimed:
        return _claimed[key][0]
    Path(lock_dir).mkdir(parents=True, exist_ok=True)
    for k in range(n_slots):
        fh = open(Path(lock_dir) / f"slot{k}.lock", "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        _claimed[key] = (k, fh)
        return k
    holders = [(Path(lock_dir) / f"slot{k}.lock").read_text().strip() for k in range(n_slots)]
    raise RuntimeError(
        f"all {n_slots} device slots in {lock_dir} are held by live processes (pids "
        f"{', '.join(holders)}): more workers than hydra.launcher.n_jobs={n_slots}, or workers "
        "left over from an interrupted sweep of this folder (kill them, then rerun)"
    )


def device_for_slot(slot: int, n_gpus: int, n_jobs: int, cores: int, cells_per_gpu: int = 1) -> dict:
    """The device a slot's jobs run on: GPU ``slot mod n_gpus``, or the CPU with its thread share."""
    if n_gpus > 0:
        if n_jobs > n_gpus * cells_per_gpu:
            log.warning(
                "hydra.launcher.n_jobs=%d > %d GPUs x cells_per_gpu=%d: %d jobs share a GPU",
                n_jobs,
                n_gpus,
                cells_per_gpu,
                -(-n_jobs // n_gpus),
            )
        return {"accelerator": "gpu", "index": slot % n_gpus, "slot": slot, "threads": max(1, cores // n_jobs)}
    return {"accelerator": "cpu", "index": None, "slot": slot, "threads": max(1, cores // max(1, n_jobs))}


def gpu_count() -> int:
    """GPUs this process may use (NVML count: no CUDA context is created)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_cells_per_gpu() -> int:
    """``${cells_per_gpu:}``: cells sharing one GPU, by its memory — 8 from 64 GiB (an "80 GB" card
    has ~79), 4 from 40 GiB, 2 from 16 GiB, else 1 (a MiniLM cell holds ~2 GiB; the smallest GPU
    of the machine decides) — and at most one cell per two CPU cores; 1 without a GPU. On an H200
    with 16 cores, 16 default cells took 68 s at 8 per GPU against 87 s at 4 (docs/benchmarks.md "On a GPU")."""
    import torch

    n = gpu_count()
    if not n:
        return 1
    gib = min(torch.cuda.get_device_properties(i).total_memory for i in range(n)) / 2**30
    by_memory = 8 if gib >= 64 else 4 if gib >= 40 else 2 if gib >= 16 else 1
    return max(1, min(by_memory, (os.cpu_count() or 1) // (2 * n)))


def default_parallel_jobs(cells_per_gpu: int = 1) -> int:
    """``${parallel_jobs:${.cells_per_gpu}}``: ``cells_per_gpu`` jobs per GPU; on a CPU-only
    machine one per core, at most 8."""
    return gpu_count() * int(cells_per_gpu) or min(os.cpu_count() or 1, 8)


def auto_jobs(n_jobs: int | None, cells_per_gpu: int | None) -> tuple[int, int]:
    """``hydra/launcher=auto``'s worker processes and cells per GPU on a GPU machine: those asked,
    else ``parallel``'s defaults."""
    per_gpu = int(cells_per_gpu) if cells_per_gpu is not None else default_cells_per_gpu()
    return (int(n_jobs) if n_jobs is not None else default_parallel_jobs(per_gpu)), per_gpu


def assign(cfg, launcher_cfg, sweep_dir: str) -> dict:
    """Pin this job to its worker's device when launched by the ``parallel`` launcher (its GPU
    as ``trainer.devices``, and its share of the cores as the torch thread count) and
    return what was used — recorded in ``results.json`` as ``device``. ``trainer.accelerator``
    stays as composed: it is part of the cell's identity, which the sweeper's manifest computed
    before launching (``auto`` picks the pinned GPU, or the CPU where there is none). Other
    launchers: the config decides."""
    import torch
    from omegaconf import open_dict

    n_jobs = _n_jobs(launcher_cfg)
    if n_jobs is None:
        if os.environ.get("SLURM_CPUS_PER_TASK"):  # a SLURM task: torch threads = the CPUs it was given
            torch.set_num_threads(int(os.environ["SLURM_CPUS_PER_TASK"]))
        return describe(cfg)
    slot = claim_slot(Path(sweep_dir) / ".slots", n_jobs)
    per_gpu = launcher_cfg.get("cells_per_gpu", launcher_cfg.get("groups_per_gpu", 1))  # parallel / lockstep
    per_gpu = per_gpu or default_cells_per_gpu()  # auto's default (cells_per_gpu: null)
    device = device_for_slot(slot, gpu_count(), n_jobs, os.cpu_count() or 1, int(per_gpu))
    if device["accelerator"] == "gpu":
        with open_dict(cfg):
            cfg.trainer.devices = [device["index"]]
    torch.set_num_threads(device["threads"])
    return {**describe(cfg), **{k: v for k, v in device.items() if v is not None}}


def _n_jobs(launcher_cfg) -> int | None:
    """``hydra.launcher.n_jobs`` of the ``parallel`` and ``lockstep`` launchers (and of ``auto``
    where it runs as ``parallel``: on a GPU); None for any other."""
    target = str(launcher_cfg.get("_target_", "")) if launcher_cfg is not None else ""
    if target.endswith("AutoLauncher"):
        return auto_jobs(launcher_cfg.get("n_jobs"), launcher_cfg.get("cells_per_gpu"))[0] if gpu_count() else None
    if not target.endswith(("JoblibLauncher", "ParallelLauncher", "LockstepLauncher")):
        return None
    n_jobs = int(launcher_cfg.n_jobs)
    return n_jobs if n_jobs >= 1 else (os.cpu_count() or 1)


def describe(cfg) -> dict:
    """What the config asks for (launchers other than ``parallel`` leave the device to it; SLURM
    sets ``CUDA_VISIBLE_DEVICES`` to the task's GPU); ``auto`` recorded as what Lightning picks
    (a GPU where CUDA has one, else the CPU)."""
    import torch

    accelerator = str(cfg.trainer.accelerator)
    if accelerator == "auto":
        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    return {
        "accelerator": accelerator,
        "devices": str(cfg.trainer.devices),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "threads": torch.get_num_threads(),
        "pid": os.getpid(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
