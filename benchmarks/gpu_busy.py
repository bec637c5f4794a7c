"""How busy the GPU was while something ran: `nvidia-smi`'s utilization.gpu (the share of each of the
driver's sample periods in which any kernel of any process was running), read every 50 ms in a
background thread. Two processes time-slicing the GPU both count; a GPU that waits on host work
does not. The mean over a benchmark level says whether a stack is bound by GPU work (near 100%) or
leaves the GPU idle between launches (host time, waits, scheduling bubbles).

    with GpuBusySampler() as busy:
        ...
    busy.summary()   # {"mean_pct": ..., "num_samples": ...} or None without nvidia-smi
"""
from __future__ import annotations

import shutil
import statistics
import subprocess
import threading

QUERY = ["--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "50"]


class GpuBusySampler:
    def __init__(self, gpu_index: int = 0) -> None:
        self.gpu_index = gpu_index
        self.samples: list[float] = []
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> "GpuBusySampler":
        binary = shutil.which("nvidia-smi")
        if binary is None:
            return self
        self._proc = subprocess.Popen([binary, f"--id={self.gpu_index}", *QUERY], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                self.samples.append(float(line.strip()))
            except ValueError:
                continue   # "[N/A]" or a partial line at exit

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._reader.join(timeout=5)

    def summary(self) -> dict | None:
        if not self.samples:
            return None
        return {"mean_pct": statistics.fmean(self.samples), "num_samples": len(self.samples)}
