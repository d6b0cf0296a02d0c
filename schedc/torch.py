"""Loaded functions as PyTorch operators: ``torch.compile(model, fullgraph=True)`` traces a model
that calls them (no graph break), and CUDA graphs capture them.

``custom_op(fn, "mylib::vadd")`` registers ``fn`` with ``torch.library``. Its schema comes from
the function's parameters: a function whose written arrays are all OUTPUT arrays gets a
*functional* operator (the inputs and scalars in, the outputs allocated and returned, as
``torch.add`` does); any other function (an INPUT_OUTPUT array: ``C += A @ B``) a *mutating* one
(its written arrays annotated ``Tensor(a!)``, nothing returned, as ``torch.add_`` does). The fake
implementation ``torch.compile`` traces with allocates the outputs with the function's shapes,
types and strides and checks nothing else; the CUDA implementation is the function's call.

Where the function is one kernel whose parameters are the caller's arrays (and their TMA tensor
maps, encoded again only when an address changes), the CUDA kernel is
C++ (``schedc/package/torchop.cpp``, built against the installed torch at the first
``custom_op``, once per machine): the dispatcher reaches the launch with no Python in between,
which is what an operator costs inside a compiled graph. It makes the fast call's checks and hands
any call that fails one to the function's Python call, which explains it with the same message.
``kernel_of(name)`` says which kernel an operator has, and why not C++.

>>> schema_of([("A", "input"), ("B", "input"), ("C", "output"), ("alpha", "float")], "vadd")
'vadd(Tensor A, Tensor B, float alpha) -> Tensor'
>>> schema_of([("A", "input"), ("C", "input_output")], "acc")
'acc(Tensor A, Tensor(a!) C) -> ()'
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable

from .errors import PackageError
from .ir.kernel import Buffer, ScalarParam
from .ir.layout import row_major_strides

_LIBRARIES: dict[str, object] = {}  # torch.library.Library per namespace, kept alive
_KERNELS: dict[str, str] = {}  # operator name -> "C++", or why its CUDA kernel is Python


def schema_of(params: list[tuple[str, str]], name: str) -> str:
    """The operator's schema from the function's parameters in call order, each (name, role)
    for an array (input, input_output, output) or (name, "float"/"int"/"bool") for a scalar:
    functional where every written array is an OUTPUT, else mutating."""
    returned = set(returned_outputs(params))
    arguments, aliases = [], iter(string.ascii_lowercase)
    for param, kind in params:
        if kind not in _ROLES:
            arguments.append(f"{kind} {param}")
        elif param not in returned:
            arguments.append(f"Tensor({next(aliases)}!) {param}" if kind != "input" else f"Tensor {param}")
    result = "()" if not returned else "Tensor" if len(returned) == 1 else f"({', '.join(['Tensor'] * len(returned))})"
    return f"{name}({', '.join(arguments)}) -> {result}"


def returned_outputs(params: list[tuple[str, str]]) -> list[str]:
    """The arrays the operator allocates and returns: every OUTPUT array, where no array is
    INPUT_OUTPUT (a functional operator); none otherwise (a mutating one)."""
    if any(kind == "input_output" for _, kind in params):
        return []
    return [param for param, kind in params if kind == "output"]


_ROLES = ("input", "input_output", "output")


def schema(fn, op: str) -> str:
    """The schema ``custom_op`` registers for the loaded function ``fn`` under the name ``op``."""
    return schema_of(_kinds(fn), op)


def _kinds(fn) -> list[tuple[str, str]]:
    return [(p.name, p.role if isinstance(p, Buffer) else _scalar_kind(p)) for p in fn.function.caller_params]


def _scalar_kind(p: ScalarParam) -> str:
    if p.dtype.value == "bool":
        return "bool"
    return "float" if p.dtype.is_float else "int"


def custom_op(fn, name: str, native: bool = True):
    """Register the loaded function ``fn`` as the operator ``name`` ("namespace::op"); returns
    ``torch.ops.namespace.op``. See the module docstring for its schema; ``native=False`` keeps
    its CUDA kernel in Python even where it could be C++."""
    try:
        import torch
    except ImportError:
        raise PackageError(f"custom_op({fn.name}, {name!r})", "needs PyTorch, which is not installed "
                                                               "(pip install torch)") from None

    namespace, _, op = name.partition("::")
    if not namespace or not op or not op.isidentifier() or not namespace.isidentifier():
        raise PackageError(f"custom_op({fn.name}, {name!r})", "the name must be 'namespace::op', both identifiers")
    params = fn.function.caller_params
    returned = returned_outputs(_kinds(fn))
    outputs = [p for p in params if p.name in returned]
    library = _LIBRARIES.get(namespace)
    if library is None:
        library = _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    library.define(schema(fn, op))
    why = _native_kernel(fn, namespace, op, returned, torch) if native else "custom_op(native=False)"
    if why:
        library.impl(op, _implementation(fn, params, outputs, torch), "CUDA")
    _KERNELS[name] = why or "C++"
    torch.library.register_fake(name, _fake(outputs, torch), lib=library)
    return getattr(getattr(torch.ops, namespace), op)


def kernel_of(name: str) -> str:
    """Which CUDA kernel the operator ``name`` registered by ``custom_op`` has: "C++", or "Python:
    " and why not C++."""
    if name not in _KERNELS:
        raise PackageError(f"kernel_of({name!r})", "custom_op registered no operator of this name")
    return _KERNELS[name] if _KERNELS[name] == "C++" else f"Python: {_KERNELS[name]}"


def _native_kernel(fn, namespace: str, op: str, returned: list[str], torch) -> str:
    """Register the operator's CUDA kernel in C++ (``torchop.cpp``); "" when done, else why not."""
    from .package import fastcall, native

    if fn.function.workspaces:
        return ("the function has workspaces (its TEMP arrays, a split-K's partial sums), which the loader allocates "
                "per stream and the C++ kernel does not")
    if not fastcall.launchable_in_c(fn.function):
        return "the function is not one kernel whose parameters are the caller's arrays (and their tensor maps)"
    module = native.torch_ops()
    if module is None:
        return f"the C++ kernel did not build: {native.reason(native.TORCH_MODULE)}"
    plan = fastcall.CallPlan(fn)
    if not plan.enabled:
        return "torch has no tensors here"
    missing = [a.name for a in plan.arrays if a.torch_dtype is None]
    if missing:
        return f"this torch has no dtype for {', '.join(missing)}"

    try:
        module.register_kernel(namespace, op, fastcall.operator_arrays(plan, set(returned)), list(plan.pairs), 0,
                               len(fn.function.kernels[0].values), functools.partial(fastcall.prepared_launch, plan),
                               fastcall.encoder(fn), fn,
                               fastcall.launch_failed)
    except (RuntimeError, ValueError, TypeError) as error:  # the operator is defined: its kernel stays Python
        return f"the C++ kernel was not registered: {error}"
    return ""


def _allocator(outputs: list[Buffer], torch) -> Callable:
    """``device -> the outputs``, empty, of the function's shapes, types and strides (what does not
    depend on the call is worked out here, once)."""
    def maker(b: Buffer) -> Callable:
        dtype, shape = getattr(torch, b.dtype.torch_name), torch.Size(b.shape)
        if tuple(b.strides) == row_major_strides(b.shape):  # torch.empty: a little faster than empty_strided
            return lambda device: torch.empty(shape, dtype=dtype, device=device)
        return lambda device: torch.empty_strided(shape, b.strides, dtype=dtype, device=device)
    makers = [maker(b) for b in outputs]
    return lambda device: [make(device) for make in makers]


def _returned(results: list):
    return None if not results else results[0] if len(results) == 1 else tuple(results)


def _device(args: tuple, torch):
    """The first tensor's device, or the current CUDA device where no argument is a tensor."""
    return next((a.device for a in args if isinstance(a, torch.Tensor)), "cuda")


def _implementation(fn, params, outputs: list[Buffer], torch) -> Callable:
    """The CUDA kernel of the operator: the function's call, its returned outputs allocated first
    (on the first input array's device; what does not depend on the call is worked out here)."""
    if not outputs:
        return lambda *args: fn(*args)  # mutating: the function's own call
    allocate = _allocator(outputs, torch)
    slots = [any(p is b for b in outputs) for p in params]  # where each output goes among the arguments
    given = [p for p, is_output in zip(params, slots) if not is_output]
    first = next((n for n, p in enumerate(given) if isinstance(p, Buffer)), None)
    if len(outputs) == 1 and slots[-1] and first is not None:  # the common case: one output, the last parameter

        def run_last(*args):
            result = allocate(args[first].device)[0]
            fn(*args, result)
            return result
        return run_last

    def run(*args):
        results = allocate(_device(args, torch))
        given, produced = iter(args), iter(results)
        fn(*[next(produced) if is_output else next(given) for is_output in slots])
        return _returned(results)
    return run


def _fake(outputs: list[Buffer], torch) -> Callable:
    """What ``torch.compile`` traces: the returned outputs, empty, on the arguments' device."""
    allocate = _allocator(outputs, torch)
    return lambda *args: _returned(allocate(_device(args, torch)))
