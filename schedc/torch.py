"""Loaded functions as PyTorch operators: ``torch.compile(model, fullgraph=True)`` traces a model
that calls them (no graph break), and CUDA graphs capture them.

``custom_op(fn, "mylib::vadd")`` registers ``fn`` with ``torch.library``. Its schema comes from
the function's parameters: a function whose written arrays are all OUTPUT arrays gets a
*functional* operator (the inputs and scalars in, the outputs allocated and returned, as
``torch.add`` does); any other function (an INPUT_OUTPUT array: ``C += A @ B``) a *mutating* one
(its written arrays annotated ``Tensor(a!)``, nothing returned, as ``torch.add_`` does). The fake
implementation ``torch.compile`` traces with allocates the outputs with the function's shapes,
types and strides and checks nothing else; the CUDA implementation is the function's call.

>>> schema_of([("A", "input"), ("B", "input"), ("C", "output"), ("alpha", "float")], "vadd")
'vadd(Tensor A, Tensor B, float alpha) -> Tensor'
>>> schema_of([("A", "input"), ("C", "input_output")], "acc")
'acc(Tensor A, Tensor(a!) C) -> ()'
"""

from __future__ import annotations

import string
from collections.abc import Callable

from .errors import PackageError
from .ir.kernel import Buffer, ScalarParam

_LIBRARIES: dict[str, object] = {}  # torch.library.Library per namespace, kept alive
_TORCH_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
                 "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
                 "bool": "bool"}


def schema_of(params: list[tuple[str, str]], name: str) -> str:
    """The operator's schema from the function's parameters in call order, each (name, role)
    for an array (input, input_output, output) or (name, "float"/"int"/"bool") for a scalar:
    functional where every written array is an OUTPUT, else mutating."""
    roles = [role for _, role in params if role in _ROLES]
    functional = "input_output" not in roles
    arguments, aliases = [], iter(string.ascii_lowercase)
    for param, kind in params:
        if kind not in _ROLES:
            arguments.append(f"{kind} {param}")
        elif not (functional and kind == "output"):
            arguments.append(f"Tensor({next(aliases)}!) {param}" if kind != "input" else f"Tensor {param}")
    outputs = [param for param, kind in params if kind == "output"] if functional else []
    result = "()" if not outputs else "Tensor" if len(outputs) == 1 else f"({', '.join(['Tensor'] * len(outputs))})"
    return f"{name}({', '.join(arguments)}) -> {result}"


_ROLES = ("input", "input_output", "output")


def schema(fn, op: str) -> str:
    """The schema ``custom_op`` registers for the loaded function ``fn`` under the name ``op``."""
    return schema_of([(p.name, p.role if isinstance(p, Buffer) else _scalar_kind(p))
                      for p in fn.function.caller_params], op)


def _scalar_kind(p: ScalarParam) -> str:
    if p.dtype.value == "bool":
        return "bool"
    return "float" if p.dtype.is_float else "int"


def custom_op(fn, name: str):
    """Register the loaded function ``fn`` as the operator ``name`` ("namespace::op"); returns
    ``torch.ops.namespace.op``. See the module docstring for its schema."""
    import torch

    namespace, _, op = name.partition("::")
    if not namespace or not op or not op.isidentifier() or not namespace.isidentifier():
        raise PackageError(f"custom_op({fn.name}, {name!r})", "the name must be 'namespace::op', both identifiers")
    params = fn.function.caller_params
    arrays = [p for p in params if isinstance(p, Buffer)]
    functional = all(b.role != "input_output" for b in arrays)
    outputs = [b for b in arrays if b.role == "output"] if functional else []
    library = _LIBRARIES.get(namespace)
    if library is None:
        library = _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    library.define(schema(fn, op))
    library.impl(op, _implementation(fn, params, outputs, torch), "CUDA")
    torch.library.register_fake(name, _fake(params, outputs, torch), lib=library)
    return getattr(getattr(torch.ops, namespace), op)


def _empty(buffer: Buffer, device, torch):
    dtype = getattr(torch, _TORCH_DTYPES[buffer.dtype.value])
    return torch.empty_strided(buffer.shape, buffer.strides, dtype=dtype, device=device)


def _implementation(fn, params, outputs: list[Buffer], torch) -> Callable:
    """The CUDA kernel of the operator: the function's call, outputs allocated first (what does
    not depend on the call is worked out here, once)."""
    if not outputs:
        def mutate(*args):
            fn(*args)
        return mutate
    empty = torch.empty_strided
    made = [(b.shape, b.strides, getattr(torch, _TORCH_DTYPES[b.dtype.value])) for b in outputs]
    output_names = {b.name for b in outputs}
    slots = [p.name in output_names for p in params]  # where each output goes among the arguments
    single = len(outputs) == 1

    def run(*args):
        device = args[0].device if args and isinstance(args[0], torch.Tensor) else \
            next(a.device for a in args if isinstance(a, torch.Tensor))
        results = [empty(shape, strides, dtype=dtype, device=device) for shape, strides, dtype in made]
        given, produced = iter(args), iter(results)
        fn(*[next(produced) if is_output else next(given) for is_output in slots])
        return results[0] if single else tuple(results)
    return run


def _fake(params, outputs: list[Buffer], torch) -> Callable:
    """What ``torch.compile`` traces: outputs of the function's shapes, types and strides."""
    def fake(*args):
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        results = [_empty(b, device, torch) for b in outputs]
        return None if not results else results[0] if len(results) == 1 else tuple(results)
    return fake
