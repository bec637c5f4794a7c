"""A thin ctypes binding of cuBLASLt's matmul with an explicit algorithm.

Why: at the decode shapes (M = 64..256 rows against weights of 1-25 M elements) cuBLAS's own pick
runs at 25-40% of tensor peak (benchmarks/results/2026-11-26-*.md). cuBLASLt lists many algorithms
for one problem (tile shapes, split-K factors, cluster shapes); timing them once per shape and keeping
the fastest is what autotuners do. torch exposes no way to choose one, so this module calls the
library torch has already loaded (no compiler, no extra wheel).

Layout: torch's y[M, N] = x[M, K] @ w[N, K]^T is, column-major, D[N, M] = op(A)[N, K] @ B[K, M]
with A = w read transposed (TRANSA = T) and B = x as it is, which is how torch calls cuBLAS too.
`MatmulPlan` holds the descriptors of one (M, N, K, dtype, residual) problem; `run` launches it on
torch's current stream, so it can be captured in a CUDA graph like any other launch.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
from dataclasses import dataclass

import torch

# cublasLt.h / library_types.h enum values
_CUBLAS_COMPUTE_32F = 68
_CUDA_R_32F, _CUDA_R_16F, _CUDA_R_16BF = 0, 2, 14
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_PREF_MAX_WORKSPACE_BYTES = 1
_ALGO_CONFIG_ID, _ALGO_CONFIG_TILE_ID, _ALGO_CONFIG_SPLITK_NUM, _ALGO_CONFIG_REDUCTION_SCHEME = 0, 1, 2, 3
_ALGO_CONFIG_STAGES_ID, _ALGO_CONFIG_CLUSTER_SHAPE_ID = 6, 8
_OP_N, _OP_T = 0, 1
_DTYPES = {torch.bfloat16: _CUDA_R_16BF, torch.float16: _CUDA_R_16F, torch.float32: _CUDA_R_32F}

WORKSPACE_BYTES = 32 * 1024 * 1024


class Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", Algo), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


class CublasLtError(RuntimeError):
    pass


def _load_library() -> ctypes.CDLL:
    """The libcublasLt torch loaded (dlopen of its soname returns the loaded copy), else one found in
    the nvidia wheels on sys.path."""
    for soname in ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"):
        try:
            return ctypes.CDLL(soname)
        except OSError:
            pass
    for root in sys.path:
        for path in sorted(glob.glob(os.path.join(root, "nvidia", "**", "libcublasLt.so*"), recursive=True)):
            try:
                return ctypes.CDLL(path)
            except OSError:
                pass
    raise CublasLtError("libcublasLt not found (is this a CUDA build of torch?)")


_lib: ctypes.CDLL | None = None
_handle = ctypes.c_void_p()
_workspaces: dict[tuple[int, int], torch.Tensor] = {}


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CublasLtError(f"{what} failed: cublasStatus {status}")


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = _load_library()
        vp, u64, i64 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64
        for name, args in {
            "cublasLtCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulDescCreate": [ctypes.POINTER(vp), ctypes.c_int, ctypes.c_int],
            "cublasLtMatmulDescSetAttribute": [vp, ctypes.c_int, vp, ctypes.c_size_t],
            "cublasLtMatrixLayoutCreate": [ctypes.POINTER(vp), ctypes.c_int, u64, u64, i64],
            "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulPreferenceSetAttribute": [vp, ctypes.c_int, vp, ctypes.c_size_t],
            "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, ctypes.c_int,
                                               ctypes.POINTER(HeuristicResult), ctypes.POINTER(ctypes.c_int)],
            "cublasLtMatmulAlgoConfigSetAttribute": [ctypes.POINTER(Algo), ctypes.c_int, vp, ctypes.c_size_t],
            "cublasLtMatmulAlgoConfigGetAttribute": [ctypes.POINTER(Algo), ctypes.c_int, vp, ctypes.c_size_t,
                                                     ctypes.POINTER(ctypes.c_size_t)],
            "cublasLtMatmulAlgoCheck": [vp, vp, vp, vp, vp, vp, ctypes.POINTER(Algo), ctypes.POINTER(HeuristicResult)],
            "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, ctypes.POINTER(Algo), vp,
                               ctypes.c_size_t, vp],
        }.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        _check(lib.cublasLtCreate(ctypes.byref(_handle)), "cublasLtCreate")
        _lib = lib
    return _lib


def workspace(device: torch.device, stream: int) -> torch.Tensor:
    """The workspace of calls on `stream` (its handle) of `device`, kept for the process: a captured
    graph holds its pointer. One per stream, as torch keeps cuBLAS's: calls on two streams may run at
    once (the voice encoder has its own stream), calls on one never do."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if (index, stream) not in _workspaces:
        _workspaces[index, stream] = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=f"cuda:{index}")
    return _workspaces[index, stream]


def algo_config(algo: Algo) -> dict[str, int]:
    """The algorithm's id, tile, split-K, reduction scheme, stages and cluster shape (for logs)."""
    lib = _library()
    out = {}
    for name, attr, ctype in (("id", _ALGO_CONFIG_ID, ctypes.c_int), ("tile", _ALGO_CONFIG_TILE_ID, ctypes.c_uint32),
                              ("splitk", _ALGO_CONFIG_SPLITK_NUM, ctypes.c_uint32),
                              ("reduction", _ALGO_CONFIG_REDUCTION_SCHEME, ctypes.c_uint32),
                              ("stages", _ALGO_CONFIG_STAGES_ID, ctypes.c_uint32),
                              ("cluster", _ALGO_CONFIG_CLUSTER_SHAPE_ID, ctypes.c_uint16)):
        value, written = ctype(0), ctypes.c_size_t(0)
        status = lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), attr, ctypes.byref(value),
                                                          ctypes.sizeof(value), ctypes.byref(written))
        out[name] = int(value.value) if status == 0 else -1
    return out


@dataclass
class MatmulPlan:
    """Descriptors of y[M, N] (+)= x[M, K] @ w[N, K]^T for one shape and dtype."""
    m: int
    n: int
    k: int
    dtype: torch.dtype
    accumulate: bool  # beta = 1: y += x w^T in place (the residual add)

    def __post_init__(self) -> None:
        lib = _library()
        if self.dtype not in _DTYPES:
            raise CublasLtError(f"unsupported dtype {self.dtype}")
        cuda_type = _DTYPES[self.dtype]
        self.desc = ctypes.c_void_p()
        _check(lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), _CUBLAS_COMPUTE_32F, _CUDA_R_32F), "DescCreate")
        for attr, value in ((_DESC_TRANSA, _OP_T), (_DESC_TRANSB, _OP_N)):
            op = ctypes.c_int32(value)
            _check(lib.cublasLtMatmulDescSetAttribute(self.desc, attr, ctypes.byref(op), ctypes.sizeof(op)), "DescSet")
        self.a_layout, self.b_layout, self.d_layout = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        # column-major (rows, cols, leading dim): A = w^T as stored [K x N], B = x [K x M], D = y [N x M]
        for name, layout, rows, cols in (("A", self.a_layout, self.k, self.n), ("B", self.b_layout, self.k, self.m),
                                         ("D", self.d_layout, self.n, self.m)):
            _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), cuda_type, rows, cols, rows), f"Layout{name}")
        self.alpha = ctypes.c_float(1.0)
        self.beta = ctypes.c_float(1.0 if self.accumulate else 0.0)

    def candidates(self, count: int = 64) -> list[Algo]:
        """cuBLASLt's heuristic list for this problem, best guess first."""
        lib = _library()
        pref = ctypes.c_void_p()
        _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "PreferenceCreate")
        limit = ctypes.c_uint64(WORKSPACE_BYTES)
        _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, _PREF_MAX_WORKSPACE_BYTES, ctypes.byref(limit),
                                                        ctypes.sizeof(limit)), "PreferenceSet")
        results = (HeuristicResult * count)()
        returned = ctypes.c_int(0)
        _check(lib.cublasLtMatmulAlgoGetHeuristic(_handle, self.desc, self.a_layout, self.b_layout, self.d_layout,
                                                  self.d_layout, pref, count, results, ctypes.byref(returned)),
               "AlgoGetHeuristic")
        return [Algo.from_buffer_copy(results[i].algo) for i in range(returned.value) if results[i].state == 0]

    def with_splitk(self, algo: Algo, splits: int) -> Algo | None:
        """A copy of algo with its split-K factor set, if the library accepts it for this problem."""
        lib = _library()
        copy = Algo.from_buffer_copy(algo)
        value = ctypes.c_uint32(splits)
        if lib.cublasLtMatmulAlgoConfigSetAttribute(ctypes.byref(copy), _ALGO_CONFIG_SPLITK_NUM, ctypes.byref(value),
                                                    ctypes.sizeof(value)) != 0:
            return None
        check = HeuristicResult()
        status = lib.cublasLtMatmulAlgoCheck(_handle, self.desc, self.a_layout, self.b_layout, self.d_layout,
                                             self.d_layout, ctypes.byref(copy), ctypes.byref(check))
        if status != 0 or check.workspace_size > WORKSPACE_BYTES:
            return None
        return copy

    def run(self, algo: Algo, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out[M, N] = x @ weight^T (accumulate: out += ...), on torch's current stream."""
        lib = _library()
        stream = torch.cuda.current_stream(x.device).cuda_stream
        ws = workspace(x.device, stream)
        _check(lib.cublasLtMatmul(_handle, self.desc, ctypes.byref(self.alpha), weight.data_ptr(), self.a_layout,
                                  x.data_ptr(), self.b_layout, ctypes.byref(self.beta), out.data_ptr(),
                                  self.d_layout, out.data_ptr(), self.d_layout, ctypes.byref(algo), ws.data_ptr(),
                                  WORKSPACE_BYTES, stream), "Matmul")
        return out
