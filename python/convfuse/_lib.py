"""ctypes binding of libconvfuse (include/convfuse.h). No torch here: plain C types and thin object wrappers.

The library is found, in order, at
  1. $CONVFUSE_LIBRARY (a file, or a folder holding libconvfuse.so),
  2. this package's folder (where a pip install puts it),
  3. <repo>/build/ and then the other <repo>/build*/ folders (in-tree use).
It is loaded once, on first use, and every function's argtypes/restype is declared once, here.
"""

import ctypes
import os
import threading
from ctypes import POINTER, Structure, byref, c_char_p, c_double, c_int, c_int64, c_size_t, c_void_p
from pathlib import Path

from ._version import __version__

# --------------------------------------------------------------------------------------------------------------
# Exceptions. Every library failure is a ConvfuseError carrying the status and cf_last_error(); the subclasses
# also derive from the builtin exception a Python caller expects for that kind of failure.


class ConvfuseError(RuntimeError):
    """A convfuse call failed. `status` is the cf_status_t name, `message` the library's cf_last_error()."""

    def __init__(self, message, status="CF_STATUS_INTERNAL_ERROR"):
        super().__init__(f"{message} [{status}]" if status else message)
        self.status = status
        self.message = message


class InvalidArgumentError(ConvfuseError, ValueError):
    """CF_STATUS_INVALID_ARGUMENT or CF_STATUS_INVALID_SHAPE: fix the argument named in the message."""


class NotSupportedError(ConvfuseError, NotImplementedError):
    """CF_STATUS_NOT_SUPPORTED: valid, but no implementation serves it (groups > 1, a chain a backend refuses)."""


class BackendUnavailableError(ConvfuseError):
    """CF_STATUS_BACKEND_UNAVAILABLE: the backend is not compiled in, or there is no suitable device."""


class LibraryNotFoundError(ConvfuseError, OSError):
    """libconvfuse.so was not found or could not be loaded."""


# --------------------------------------------------------------------------------------------------------------
# Enums and structs, mirroring include/convfuse.h field by field (enums are C ints).

STATUS_NAMES = (
    "CF_STATUS_SUCCESS",
    "CF_STATUS_INVALID_ARGUMENT",
    "CF_STATUS_INVALID_SHAPE",
    "CF_STATUS_NOT_SUPPORTED",
    "CF_STATUS_BACKEND_UNAVAILABLE",
    "CF_STATUS_WORKSPACE_TOO_SMALL",
    "CF_STATUS_OUT_OF_MEMORY",
    "CF_STATUS_CUDA_ERROR",
    "CF_STATUS_INTERNAL_ERROR",
)
STATUS_SUCCESS = 0
_STATUS_EXCEPTIONS = {
    1: InvalidArgumentError,
    2: InvalidArgumentError,
    3: NotSupportedError,
    4: BackendUnavailableError,
}

CONV_2D, CONV_TRANSPOSE_2D = 0, 1
DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
BACKENDS = {"cpu": 0, "cuda": 1}
MATHS = {"default": 0, "tf32": 1, "strict": 2}
BN_TRAINING, BN_INFERENCE = 0, 1
BN_MOMENTUM_CUMULATIVE = -1.0
CHAIN_MAX_OPS = 16

# CF_OP_LIST order; checked against cf_op_kind_name() when the library loads.
OP_KINDS = (
    "add_channel",
    "mul_scalar",
    "add_scalar",
    "affine_channel",
    "batch_norm",
    "softmax_channels",
    "sigmoid",
    "relu",
    "tanh",
    "gelu",
)


class ConvDesc(Structure):
    """cf_conv_desc_t."""

    _fields_ = [
        ("kind", c_int),
        ("n", c_int64),
        ("c_in", c_int64),
        ("h", c_int64),
        ("w", c_int64),
        ("c_out", c_int64),
        ("kh", c_int64),
        ("kw", c_int64),
        ("stride_h", c_int64),
        ("stride_w", c_int64),
        ("pad_h", c_int64),
        ("pad_w", c_int64),
        ("out_pad_h", c_int64),
        ("out_pad_w", c_int64),
        ("dil_h", c_int64),
        ("dil_w", c_int64),
        ("groups", c_int64),
        ("has_bias", c_int),
        ("dtype", c_int),
    ]

    def key(self):
        """Hashable value of every field (plan-cache key)."""
        return tuple(getattr(self, name) for name, _ in self._fields_)


class OpArgs(Structure):
    """cf_op_args_t. Pointers are addresses (int) or None."""

    _fields_ = [
        ("channel_a", c_void_p),
        ("channel_b", c_void_p),
        ("running_mean", c_void_p),
        ("running_var", c_void_p),
        ("num_batches_tracked", c_void_p),
    ]


class Args(Structure):
    """cf_args_t."""

    _fields_ = [
        ("src", c_void_p),
        ("wei", c_void_p),
        ("bia", c_void_p),
        ("dst", c_void_p),
        ("ops", OpArgs * CHAIN_MAX_OPS),
    ]


# --------------------------------------------------------------------------------------------------------------
# Signatures: (name, restype, argtypes). Every function of the header, declared once.

_chain_p = c_void_p
_plan_p = c_void_p
_SIGNATURES = [
    ("cf_version", c_int, []),
    ("cf_version_string", c_char_p, []),
    ("cf_status_string", c_char_p, [c_int]),
    ("cf_last_error", c_char_p, []),
    ("cf_conv_desc_init", c_int, [POINTER(ConvDesc), c_int] + [c_int64] * 7),
    ("cf_conv_desc_output_dims", c_int, [POINTER(ConvDesc), POINTER(c_int64), POINTER(c_int64)]),
    ("cf_op_kind_name", c_char_p, [c_int]),
    ("cf_chain_create", c_int, [POINTER(_chain_p)]),
    ("cf_chain_destroy", c_int, [_chain_p]),
    ("cf_chain_append_add_channel", c_int, [_chain_p]),
    ("cf_chain_append_mul_scalar", c_int, [_chain_p, c_double]),
    ("cf_chain_append_add_scalar", c_int, [_chain_p, c_double]),
    ("cf_chain_append_affine_channel", c_int, [_chain_p]),
    ("cf_chain_append_batch_norm", c_int, [_chain_p, c_int, c_double, c_double]),
    ("cf_chain_append_softmax_channels", c_int, [_chain_p]),
    ("cf_chain_append_sigmoid", c_int, [_chain_p]),
    ("cf_chain_append_relu", c_int, [_chain_p]),
    ("cf_chain_append_tanh", c_int, [_chain_p]),
    ("cf_chain_append_gelu", c_int, [_chain_p]),
    ("cf_chain_length", c_int, [_chain_p, POINTER(c_int)]),
    ("cf_chain_op_kind", c_int, [_chain_p, c_int, POINTER(c_int)]),
    ("cf_plan_create", c_int, [POINTER(_plan_p), POINTER(ConvDesc), _chain_p, c_int, c_int]),
    ("cf_plan_destroy", c_int, [_plan_p]),
    ("cf_plan_impl_name", c_int, [_plan_p, POINTER(c_char_p)]),
    ("cf_plan_output_dims", c_int, [_plan_p, POINTER(c_int64), POINTER(c_int64)]),
    ("cf_plan_workspace_size", c_int, [_plan_p, POINTER(c_size_t)]),
    ("cf_plan_execute", c_int, [_plan_p, POINTER(Args), c_void_p, c_size_t, c_void_p]),
    ("cf_run", c_int, [POINTER(ConvDesc), _chain_p, c_int, c_int, POINTER(Args), c_void_p, c_size_t, c_void_p]),
    ("cf_backend_available", c_int, [c_int, POINTER(c_int)]),
]

_LIB_NAMES = ("libconvfuse.so", "libconvfuse.dylib", "convfuse.dll")
_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    """Paths tried, in order (see the module docstring)."""
    env = os.environ.get("CONVFUSE_LIBRARY")
    if env:
        p = Path(env)
        # An explicit setting is the only candidate: silently falling back would hide a wrong path.
        return [p / n for n in _LIB_NAMES] if p.is_dir() else [p]
    here = Path(__file__).resolve().parent
    out = [here / n for n in _LIB_NAMES]
    repo = here.parent.parent
    builds = [repo / "build"] + sorted(d for d in repo.glob("build*") if d.is_dir() and d.name != "build")
    for d in builds:
        out += [d / n for n in _LIB_NAMES]
    return out


def _version_tuple(v):
    return (v // 10000, v // 100 % 100, v % 100)


def lib():
    """The loaded library (ctypes.CDLL), loading and checking it on first call. Raises LibraryNotFoundError."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = _candidates()
        path = next((p for p in tried if p.is_file()), None)
        if path is None:
            raise LibraryNotFoundError(
                "libconvfuse.so not found; tried: " + ", ".join(str(p) for p in tried)
                + ". Build it (cmake -S . -B build && cmake --build build -j) or set CONVFUSE_LIBRARY.",
                status=None,
            )
        try:
            cdll = ctypes.CDLL(str(path))
        except OSError as e:
            raise LibraryNotFoundError(f"cannot load {path}: {e}", status=None) from e
        for name, restype, argtypes in _SIGNATURES:
            try:
                fn = getattr(cdll, name)
            except AttributeError as e:
                raise LibraryNotFoundError(f"{path} lacks symbol {name}: stale build?", status=None) from e
            fn.restype = restype
            fn.argtypes = argtypes
        lib_v = _version_tuple(cdll.cf_version())
        pkg_v = tuple(int(x) for x in __version__.split(".")[:3])
        if lib_v[:2] != pkg_v[:2]:
            raise LibraryNotFoundError(
                f"{path} is convfuse {'.'.join(map(str, lib_v))}, this package is {__version__} "
                "(MAJOR.MINOR must match): rebuild the library or point CONVFUSE_LIBRARY at the right one",
                status=None,
            )
        names = tuple(cdll.cf_op_kind_name(i).decode() for i in range(len(OP_KINDS)))
        if names != OP_KINDS or cdll.cf_op_kind_name(len(OP_KINDS)) is not None:
            raise LibraryNotFoundError(f"{path}: op list {names} differs from the binding's {OP_KINDS}", status=None)
        _lib_path = path
        _lib = cdll
        return _lib


def library_path():
    """Path of the loaded library (loads it)."""
    lib()
    return _lib_path


def last_error():
    return (lib().cf_last_error() or b"").decode(errors="replace")


def status_name(status):
    return (lib().cf_status_string(status) or b"CF_STATUS_UNKNOWN").decode()


def check(status, what=""):
    """Raise the exception for a non-success status, with cf_last_error() as the message."""
    if status == STATUS_SUCCESS:
        return
    msg = last_error() or what or "convfuse call failed"
    if what and what not in msg:
        msg = f"{what}: {msg}"
    raise _STATUS_EXCEPTIONS.get(status, ConvfuseError)(msg, status_name(status))


def version_string():
    return lib().cf_version_string().decode()


def backend_available(backend):
    """True if `backend` ("cpu"/"cuda") can run here."""
    avail = c_int(0)
    check(lib().cf_backend_available(BACKENDS[backend], byref(avail)), "cf_backend_available")
    return bool(avail.value)


# --------------------------------------------------------------------------------------------------------------
# Object wrappers. They own their handles and destroy them when collected.


class Chain:
    """cf_chain_t built from a list of (kind, params) pairs, where params are the plan-time scalars:
    mul_scalar/add_scalar: (s,); batch_norm: (mode, eps, momentum); others: ()."""

    def __init__(self, ops):
        L = lib()
        self._lib = L
        self.handle = c_void_p()
        check(L.cf_chain_create(byref(self.handle)), "cf_chain_create")
        try:
            for i, (kind, params) in enumerate(ops):
                fn = getattr(L, "cf_chain_append_" + kind)
                check(fn(self.handle, *params), f"chain[{i}] ({kind})")
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.handle:
            self._lib.cf_chain_destroy(self.handle)
            self.handle = c_void_p()

    def __del__(self):
        self.close()


class Plan:
    """cf_plan_t for (desc, chain, backend, math). Immutable; safe to execute from several threads."""

    def __init__(self, desc, chain, backend, math):
        L = lib()
        self._lib = L
        self.handle = c_void_p()
        check(L.cf_plan_create(byref(self.handle), byref(desc), chain.handle, BACKENDS[backend], MATHS[math]),
              "cf_plan_create")
        name = c_char_p()
        oh, ow = c_int64(), c_int64()
        ws = c_size_t()
        check(L.cf_plan_impl_name(self.handle, byref(name)), "cf_plan_impl_name")
        check(L.cf_plan_output_dims(self.handle, byref(oh), byref(ow)), "cf_plan_output_dims")
        check(L.cf_plan_workspace_size(self.handle, byref(ws)), "cf_plan_workspace_size")
        self.impl_name = name.value.decode()
        self.output_hw = (oh.value, ow.value)
        self.workspace_bytes = ws.value

    def execute(self, args, workspace=None, workspace_bytes=0, stream=None):
        check(self._lib.cf_plan_execute(self.handle, byref(args), workspace, workspace_bytes, stream),
              "cf_plan_execute")

    def close(self):
        if self.handle:
            self._lib.cf_plan_destroy(self.handle)
            self.handle = c_void_p()

    def __del__(self):
        self.close()


def conv_desc(kind, n, c_in, h, w, c_out, kh, kw):
    """cf_conv_desc_init() with PyTorch's defaults filled in."""
    d = ConvDesc()
    check(lib().cf_conv_desc_init(byref(d), kind, n, c_in, h, w, c_out, kh, kw), "cf_conv_desc_init")
    return d


def output_dims(desc):
    oh, ow = c_int64(), c_int64()
    check(lib().cf_conv_desc_output_dims(byref(desc), byref(oh), byref(ow)), "cf_conv_desc_output_dims")
    return oh.value, ow.value


__all__ = [
    "ConvfuseError", "InvalidArgumentError", "NotSupportedError", "BackendUnavailableError", "LibraryNotFoundError",
    "ConvDesc", "OpArgs", "Args", "Chain", "Plan", "lib", "check", "conv_desc", "output_dims", "backend_available",
    "version_string", "library_path", "OP_KINDS", "BACKENDS", "MATHS", "CHAIN_MAX_OPS",
]
