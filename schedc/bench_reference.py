"""References timed beside a schedc function in the same run.

- ``cublas``: the nest's matrix product through torch (cuBLAS): ``C.addmm_(A, B)`` when all
  three arrays share a type (``torch.mm(A, B, out=C)`` for an OUTPUT C, which is not read); of
  16-bit operands into a float32 C ``torch.addmm(C, A, B, out_dtype=float32, out=C)`` where torch
  has it (else ``torch.matmul(A, B)`` in the operands' type: fewer bytes than the function
  moves); of 8-bit floats ``torch._scaled_mm``. tf32 is allowed exactly when the plan multiplies
  in tf32. A product fused with an epilogue on C is compared with the product alone.
- ``copy``: a device-to-device copy moving as many bytes as the function must (each input read
  once, each output written once), through the driver.
- ``torch``: an element-wise statement ``C[i, j] = A[i, j] op B[i, j] ...`` (``+ - * /`` of
  whole arrays and constants) through torch, the last operation writing into C (``out=``).

Each reference runs on the values the function is timed on (the same input sets, copied into
torch tensors of the arrays' layouts): at a GPU's power cap the clock follows the energy a launch
takes, and that depends on the bits multiplied (H200, fp16 4096³: cuBLAS at 1605 MHz on positive
inputs, 1485 MHz on the same magnitudes with random signs; BENCHMARKS.md 2026-11-27, sixth session).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import data
from .errors import LaunchError
from .ir.affine import Affine
from .ir.kernel import Binary, Cast, Const, Load, Var
from .ir.layout import row_major_strides
from .ir.patterns import buffers_read
from .ir.types import ScalarType
from .package import driver

KINDS = ("cublas", "copy", "torch")


Inputs = list[dict[str, np.ndarray]]  # the input sets a function is timed on, by array name


@dataclass(frozen=True)
class Reference:
    """A reference ready to time: ``launch(i)`` runs it on input set ``i % len(inputs)``;
    ``tensors[i]``: that set's device tensors by the function's array names, the result under
    the output's name (C: accumulated into, or written where the types differ). Use it in a
    ``with`` block (or call ``close``): cuBLAS's tf32 setting holds until then."""

    name: str
    launch: Callable[[int], None]
    tensors: list[dict[str, object]] = field(default_factory=list)
    close: Callable[[], None] = lambda: None  # puts back the torch settings the reference changed

    def __enter__(self) -> Reference:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reference_launcher(kind: str, model, inputs: Inputs) -> Reference:
    """The reference ``kind`` of ``model`` on the input sets ``inputs``."""
    if kind == "cublas":
        return _cublas(model, inputs)
    if kind == "copy":
        return _copy(model)
    if kind == "torch":
        return _torch_elementwise(model, inputs)
    raise LaunchError(f"--compare {kind}", f"unknown reference; choose one of {', '.join(KINDS)}")


def matmul_roles(model) -> dict[str, tuple[str, bool]] | None:
    """For ``C[p, q] += A[., .] * B[., .]`` (alone, or fused with an epilogue that writes C only):
    each role's buffer and whether it is used transposed (A as [r, p], B as [q, r]). None when the
    nest is not a matrix product."""
    s = _product_statement(model)
    if s is None:
        return None
    value = _strip(s.value)
    if not (isinstance(value, Binary) and value.op == "+"):
        return None
    product = _strip(value.rhs)
    if not (isinstance(product, Binary) and product.op == "*"):
        return None
    loads = [_strip(product.lhs), _strip(product.rhs)]
    if not all(isinstance(x, Load) and len(x.index) == 2 for x in loads) or len(s.index) != 2:
        return None
    dims = [_single(i) for i in s.index]
    operand_dims = [[_single(i) for i in x.index] for x in loads]
    if None in dims or any(None in d for d in operand_dims):
        return None
    p, q = dims
    for a, b in (loads, loads[::-1]):
        ad = [_single(i) for i in a.index]
        bd = [_single(i) for i in b.index]
        if p in ad and q in bd:
            r = next((d for d in ad if d != p), None)
            if r is None or r not in bd:
                return None
            return {"A": (a.buffer, ad == [r, p]), "B": (b.buffer, bd == [q, r]), "C": (s.buffer, False)}
    return None


def _product_statement(model):
    """The nest's one statement, or the first part's one statement of a fused nest whose other
    parts write the same array (an epilogue: the reference times the product alone)."""
    if len(model.statements) == 1:
        return model.statements[0]
    fusion = model.fusion
    if fusion is None or len(fusion.parts[0]) != 1:
        return None
    first = model.statements[fusion.parts[0][0]]
    rest = [model.statements[n] for part in fusion.parts[1:] for n in part]
    return first if all(s.buffer == first.buffer for s in rest) else None


def _strip(e):
    while isinstance(e, Cast):
        e = e.operand
    return e


def _single(index) -> str | None:
    a = Affine.of(index)
    return a.terms[0][0] if len(a.terms) == 1 and a.terms[0][1] == 1 and a.const == 0 else None


def device_tensor(buffer, array: np.ndarray, torch):
    """A CUDA tensor of ``array``'s values (bit for bit) in ``buffer``'s type, shape and layout."""
    flat = data.to_storage(buffer, array)
    bits = flat.view({1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[flat.dtype.itemsize])
    stored = torch.from_numpy(bits).to("cuda").view(getattr(torch, buffer.dtype.torch_name))
    return stored.as_strided(buffer.shape, buffer.strides)


def _cublas(model, inputs: Inputs):
    roles = matmul_roles(model)
    if roles is None:
        raise LaunchError("--compare cublas", f"{model.function} is not a matrix product C += A * B")
    reference = _cublas_product(model, roles, inputs)
    if len(model.statements) > 1:
        return Reference(f"{reference.name}, the product alone", reference.launch, reference.tensors,
                         reference.close)
    return reference


def _cublas_product(model, roles, inputs: Inputs):
    try:
        import torch
    except ImportError:
        raise LaunchError("--compare cublas", "needs torch (cuBLAS) installed") from None
    dtypes = {ScalarType.float16: torch.float16, ScalarType.bfloat16: torch.bfloat16,
              ScalarType.float32: torch.float32, ScalarType.float64: torch.float64}
    buffers = {role: model.buffer(name) for role, (name, _) in roles.items()}
    if buffers["A"].dtype.arithmetic is not buffers["A"].dtype:
        return _scaled_mm(buffers, roles, inputs, dtypes, torch)
    if any(b.dtype not in dtypes for b in buffers.values()):
        raise LaunchError("--compare cublas", "cuBLAS reference needs floating-point arrays")
    tf32 = model.tensorize is not None and buffers["A"].dtype is ScalarType.float32
    operands = [tuple(_operand(buffers, roles, role, arrays, torch) for role in "ABC") for arrays in inputs]
    sets = len(operands)
    names = [buffers[role].name for role in "ABC"]
    wide = _wide_output(buffers, torch)
    torch.cuda.synchronize()
    settings, before = torch.backends.cuda.matmul, torch.backends.cuda.matmul.allow_tf32
    settings.allow_tf32 = tf32  # from here on the Reference returned puts it back

    def close() -> None:
        settings.allow_tf32 = before
    if len({b.dtype for b in buffers.values()}) == 1 and buffers["C"].role == "output":
        def launch(i: int) -> None:  # C = A @ B: C's poisoned values are not read
            a, b, c = operands[i % sets]
            torch.mm(a, b, out=c)
        return Reference(f"cuBLAS mm {buffers['A'].dtype.value}{' tf32' if tf32 else ''} (torch)", launch,
                         [dict(zip(names, ops, strict=True)) for ops in operands], close)
    if len({b.dtype for b in buffers.values()}) == 1:
        def launch(i: int) -> None:
            a, b, c = operands[i % sets]
            c.addmm_(a, b)
        return Reference(f"cuBLAS addmm {buffers['A'].dtype.value}{' tf32' if tf32 else ''} (torch)", launch,
                         [dict(zip(names, ops, strict=True)) for ops in operands], close)
    if wide:
        def launch(i: int) -> None:
            a, b, c = operands[i % sets]
            torch.addmm(c, a, b, out_dtype=torch.float32, out=c)
        return Reference(f"cuBLAS addmm {buffers['A'].dtype.value} into float32 (torch, out_dtype)", launch,
                         [dict(zip(names, ops, strict=True)) for ops in operands], close)
    outputs = [torch.empty_like(c, dtype=a.dtype) for a, _, c in operands]

    def launch(i: int) -> None:
        a, b, _ = operands[i % sets]
        torch.matmul(a, b, out=outputs[i % sets])
    tensors = [dict(zip(names, (a, b, out), strict=True)) for (a, b, _), out in zip(operands, outputs, strict=True)]
    return Reference(f"cuBLAS matmul {buffers['A'].dtype.value} (torch; output {buffers['A'].dtype.value})", launch,
                     tensors, close)


def _wide_output(buffers, torch) -> bool:
    """Whether cuBLAS computes ``C += A @ B`` of 16-bit A and B into a float32 C itself (torch's
    ``addmm(..., out_dtype=float32)``, torch 2.8 on): the same bytes moved as the function."""
    if buffers["C"].dtype is not ScalarType.float32 or buffers["A"].dtype not in (ScalarType.float16,
                                                                                 ScalarType.bfloat16):
        return False
    half = getattr(torch, buffers["A"].dtype.torch_name)
    try:
        torch.addmm(torch.zeros(1, 1, device="cuda"), torch.zeros(1, 1, device="cuda", dtype=half),
                    torch.zeros(1, 1, device="cuda", dtype=half), out_dtype=torch.float32)
    except (TypeError, RuntimeError):
        return False
    return True


def _operand(buffers, roles, role: str, arrays, torch):
    """The role's array of one input set on the device, viewed as the product uses it."""
    b = buffers[role]
    t = device_tensor(b, arrays[b.name], torch)
    return t.t() if roles[role][1] else t


def _scaled_mm(buffers, roles, inputs: Inputs, dtypes, torch):
    """An 8-bit float product: cuBLAS through ``torch._scaled_mm`` (A row-major, B column-major:
    copies of the function's operands where their layouts differ; per-tensor scales of 1, float32
    accumulation without cuBLAS's extra promotions, as wgmma accumulates), C of the function's
    type (written, not accumulated)."""
    a, b, c = (buffers[role] for role in ("A", "B", "C"))
    if b.dtype is not a.dtype or c.dtype not in (ScalarType.bfloat16, ScalarType.float16, ScalarType.float32):
        raise LaunchError("--compare cublas", f"torch._scaled_mm multiplies two {a.dtype.value} operands into "
                                              f"bfloat16, float16 or float32, not {b.dtype.value} into {c.dtype.value}")
    one = torch.ones((), device="cuda", dtype=torch.float32)

    def pair(arrays):
        left = _operand(buffers, roles, "A", arrays, torch).contiguous()
        right = _operand(buffers, roles, "B", arrays, torch).t().contiguous().t()
        return left, right
    operands = [pair(arrays) for arrays in inputs]
    outputs = [torch.empty(c.shape, device="cuda", dtype=dtypes[c.dtype]) for _ in operands]
    sets = len(operands)
    torch.cuda.synchronize()

    def launch(i: int) -> None:
        left, right = operands[i % sets]
        torch._scaled_mm(left, right, one, one, out_dtype=dtypes[c.dtype], use_fast_accum=True, out=outputs[i % sets])
    return Reference(f"cuBLAS torch._scaled_mm {a.dtype.value} (fast accumulation; output {c.dtype.value})", launch,
                     [{a.name: left, b.name: right, c.name: out} for (left, right), out in zip(operands, outputs,
                                                                                               strict=True)])


def _copy(model):
    read = set().union(*(buffers_read(s.value) for s in model.statements))
    total = 0
    for b in model.buffers:
        if b.kind != "param":
            continue
        if b.name in read:
            total += b.size * b.dtype.size
        if b.role in ("output", "input_output"):
            total += b.size * b.dtype.size
    nbytes = max(total // 2, 1)
    source, target = driver.DeviceMemory(nbytes), driver.DeviceMemory(nbytes)

    def launch(i: int) -> None:
        driver.copy_device(target.pointer, source.pointer, nbytes)

    return Reference(f"device copy of {nbytes} bytes (cuMemcpyDtoD)", launch)


def _torch_elementwise(model, inputs: Inputs):
    here = "--compare torch"
    try:
        import torch
    except ImportError:
        raise LaunchError(here, "needs torch installed") from None
    dtypes = {ScalarType.float16: torch.float16, ScalarType.bfloat16: torch.bfloat16,
              ScalarType.float32: torch.float32, ScalarType.float64: torch.float64}
    (store,) = model.statements if len(model.statements) == 1 else (None,)
    whole = tuple(Var(name) for name, _ in model.dims)
    if store is None or store.index != whole or not isinstance(store.value, Binary):
        dims = ", ".join(n for n, _ in model.dims)
        raise LaunchError(here, f"{model.function} is not one element-wise statement C[{dims}] = a op b "
                                "over whole arrays")
    functions = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div}

    def array(name: str, arrays):
        b = model.buffer(name)
        if b.dtype not in dtypes or b.strides != row_major_strides(b.shape):
            raise LaunchError(here, f"{name}: the torch reference needs row-major floating-point arrays")
        return device_tensor(b, arrays[name], torch)

    def evaluate(e, arrays, out=None):
        if isinstance(e, Load) and e.index == whole:
            return arrays[e.buffer]
        if isinstance(e, Const):
            return e.value
        if isinstance(e, Binary) and e.op in functions:
            lhs, rhs = evaluate(e.lhs, arrays), evaluate(e.rhs, arrays)
            return functions[e.op](lhs, rhs, out=out) if out is not None else functions[e.op](lhs, rhs)
        raise LaunchError(here, f"{model.function}: {type(e).__name__} has no torch equivalent here")

    names = sorted(buffers_read(store.value) | {store.buffer})
    sets_of_arrays = [{name: array(name, arrays) for name in names} for arrays in inputs]
    sets = len(sets_of_arrays)
    evaluate(store.value, sets_of_arrays[0], sets_of_arrays[0][store.buffer])  # checks the statement
    torch.cuda.synchronize()

    def launch(i: int) -> None:
        arrays = sets_of_arrays[i % sets]
        evaluate(store.value, arrays, arrays[store.buffer])

    return Reference(f"torch element-wise {store.buffer} = {_render(store.value)}", launch, sets_of_arrays)


def _render(e) -> str:
    if isinstance(e, Load):
        return e.buffer
    if isinstance(e, Binary):
        return f"({_render(e.lhs)} {e.op} {_render(e.rhs)})"
    return repr(getattr(e, "value", e))
