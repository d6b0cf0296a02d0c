"""GPU targets as data: one table of models, read by every check (nothing else names a GPU).

>>> t = Target(Target.Model.NVIDIA_H100)
>>> t.arch, t.max_threads_per_block, t.shared_memory_static, t.shared_memory_max
('sm_90', 1024, 49152, 232448)
>>> t.tensor_core_info.compute_tensor_splits(MMAShape.M16xN16xK8_B1, num_total_passes=4)
(16, 16, 32)
"""

from __future__ import annotations

import copy
import enum
import math
from dataclasses import dataclass

from .errors import TargetError
from .ir.types import ScalarType


class GridUnit(enum.Enum):
    """Execution units a schedule index can be bound to."""

    BLOCK_X = "BLOCK_X"
    BLOCK_Y = "BLOCK_Y"
    BLOCK_Z = "BLOCK_Z"
    THREAD_X = "THREAD_X"
    THREAD_Y = "THREAD_Y"
    THREAD_Z = "THREAD_Z"
    WARP_X = "WARP_X"
    WARP_Y = "WARP_Y"
    WARPGROUP_X = "WARPGROUP_X"  # 4 warps (128 threads) that issue wgmma together (sm_90a)
    WARPGROUP_Y = "WARPGROUP_Y"

    @property
    def level(self) -> str:
        """'block', 'thread', 'warp' or 'warpgroup'."""
        return self.value.split("_")[0].lower()

    @property
    def axis(self) -> str:
        return self.value.split("_")[1].lower()


class MemorySpace(enum.Enum):
    """Where a cache lives (used by ``plan.cache``)."""

    NONE = "NONE"
    GLOBAL = "GLOBAL"
    SHARED = "SHARED"
    PRIVATE = "PRIVATE"
    MMA_FRAGMENT = "MMA_FRAGMENT"


class CacheStrategy(enum.Enum):
    """How a block's threads split a cache copy: STRIPED (consecutive threads take consecutive
    vectors: coalesced) or BLOCKED (each thread one contiguous run); AUTO picks STRIPED."""

    AUTO = "AUTO"
    STRIPED = "STRIPED"
    BLOCKED = "BLOCKED"


class CopyEngine(enum.Enum):
    """What fills a SHARED cache (``plan.cache(..., engine=)``): THREADS (the block's threads,
    with cp.async on sm_80+), TMA (the tensor memory accelerator, sm_90: one thread issues a
    bulk copy of the whole box, completed on an mbarrier) or AUTO (TMA where the tile feeds
    wgmma, THREADS otherwise)."""

    AUTO = "AUTO"
    THREADS = "THREADS"
    TMA = "TMA"


class _Shape(enum.Enum):
    """Tensor-core operation shapes (one pass): ``M{m}xN{n}xK{k}_B{blocks}``, every member of
    Accera's, and the warpgroup shapes of Hopper's wgmma. NVIDIA warp tensor cores have the first
    four; the next ten are AMD MFMA shapes, which ``tensorize`` refuses on NVIDIA targets with the
    nearest NVIDIA shape; ``M64xN{n}xK16_B1`` (16-bit operands), ``M64xN{n}xK8_B1`` (tf32) and
    ``M64xN{n}xK32_B1`` (8-bit floats), n = 8, 16, ..., 256, are one warpgroup's wgmma tile (sm_90a).

    >>> MMAShape.M64xN64xK4_B2.mnk, MMAShape.M64xN64xK4_B2.blocks
    ((64, 64, 4), 2)
    >>> MMAShape.M64xN256xK16_B1.mnk
    (64, 256, 16)
    """

    @property
    def mnk(self) -> tuple[int, int, int]:
        m, n, rest = self.value.split("x")
        return int(m[1:]), int(n[1:]), int(rest.split("_")[0][1:])

    @property
    def blocks(self) -> int:
        return int(self.value.split("_B")[1])


_ACCERA_SHAPES = [
    "M16xN16xK16_B1", "M16xN16xK8_B1", "M32xN8xK16_B1", "M8xN32xK16_B1", "M64xN64xK1_B4",
    "M64xN64xK1_B2", "M32xN32xK2_B1", "M16xN16xK4_B1", "M64xN64xK2_B4", "M64xN64xK2_B2",
    "M32xN32xK4_B1", "M64xN64xK4_B4", "M64xN64xK4_B2", "M32xN32xK8_B1",
]
WGMMA_N = tuple(range(8, 257, 8))  # wgmma's n: multiples of 8 up to 256
_WGMMA_SHAPES = [f"M64xN{n}xK{k}_B1" for k in (16, 8, 32) for n in WGMMA_N]
_FP8_WARP_SHAPES = ["M16xN16xK32_B1"]  # a warp's tile of 8-bit floats: two mma.sync.m16n8k32 (sm_89)
MMAShape = _Shape("MMAShape", [(name, name) for name in _ACCERA_SHAPES + _FP8_WARP_SHAPES + _WGMMA_SHAPES],
                  module=__name__, qualname="MMAShape")
MMAShape.__doc__ = _Shape.__doc__


class _Auto:
    """Accera's ``Constants.AUTO``: let schedc choose (where an argument's default does)."""

    def __repr__(self) -> str:
        return "AUTO"


class Constants:
    """Accera's ``acc.Constants``: ``AUTO`` stands for an argument's default choice."""

    AUTO = _Auto()


class Instruction(enum.Enum):
    """Which tensor-core instructions ``plan.tensorize`` uses (``instruction=``): AUTO picks the
    fastest family the target has for the operand types and shape."""

    AUTO = "AUTO"
    WMMA = "WMMA"  # wmma.load / wmma.mma.sync / wmma.store: the warp's tile layout is opaque
    MMA_SYNC = "MMA_SYNC"  # ldmatrix + mma.sync.aligned.m16n8k*: documented per-lane layouts
    WGMMA = "WGMMA"  # wgmma.mma_async (sm_90a): a warpgroup's 64xN tile, operands in shared memory


class MMASchedulingPolicy(enum.Enum):
    """The order of a warp's tensor-core products when a tile takes several passes and the warp
    holds several accumulator tiles (register blocking): ``PASS_ORDER`` (default) issues each
    pass for every tile before the next pass; ``BLOCK_ORDER`` issues every pass of a pass group
    for one tile before the next tile. The results are the same (each tile sums its passes in
    order); the order changes which products are in flight together."""

    PASS_ORDER = "PASS_ORDER"
    BLOCK_ORDER = "BLOCK_ORDER"


class MMAFragmentOp(enum.Enum):
    """Element-wise operations on the accumulator fragment around a tensorized product.

    ``NONE``: f(x) = x; ``SET``: f(x) = arg; ``SCALE``: f(x) = arg * x; ``ReLU``: f(x) = max(0, x),
    compiled to a select, so Accera's branch-free ``ReLU_NoConditional`` is the same member.

    >>> MMAFragmentOp.ReLU_NoConditional is MMAFragmentOp.ReLU
    True
    """

    NONE = "NONE"
    SET = "SET"
    SCALE = "SCALE"
    ReLU = "ReLU"
    ReLU_NoConditional = "ReLU"  # Accera's branch-free ReLU (x * (x > 0)): the same select on NVIDIA, no branch


@dataclass(frozen=True)
class TensorCoreMode:
    """One way the tensor cores can multiply: operand type, accumulator types, shapes."""

    operand: ScalarType
    accumulators: tuple[ScalarType, ...]
    shapes: tuple[MMAShape, ...]
    precision: str  # what the hardware multiplies in: "fp16", "bf16", "tf32", "s8", "u8"
    min_sm: int


_WMMA_16 = (MMAShape.M16xN16xK16_B1, MMAShape.M32xN8xK16_B1, MMAShape.M8xN32xK16_B1)
WGMMA_16 = tuple(MMAShape[f"M64xN{n}xK16_B1"] for n in WGMMA_N)
WGMMA_TF32 = tuple(MMAShape[f"M64xN{n}xK8_B1"] for n in WGMMA_N)
WGMMA_FP8 = tuple(MMAShape[f"M64xN{n}xK32_B1"] for n in WGMMA_N)
# 8-bit integers (s32 accumulators): n of 8, 16, 24, then multiples of 16 (ptxas refuses m64n40k32.s32.s8)
WGMMA_INT8 = tuple(s for s in WGMMA_FP8 if s.mnk[1] < 32 or s.mnk[1] % 16 == 0)
_F32 = ScalarType.float32
TENSOR_CORE_MODES: tuple[TensorCoreMode, ...] = (
    TensorCoreMode(ScalarType.float16, (_F32, ScalarType.float16), _WMMA_16, "fp16", 70),
    TensorCoreMode(ScalarType.bfloat16, (_F32,), _WMMA_16, "bf16", 80),
    TensorCoreMode(ScalarType.float32, (_F32,), (MMAShape.M16xN16xK8_B1,), "tf32", 80),
    TensorCoreMode(ScalarType.float16, (_F32,), WGMMA_16, "fp16", 90),
    TensorCoreMode(ScalarType.bfloat16, (_F32,), WGMMA_16, "bf16", 90),
    TensorCoreMode(ScalarType.float32, (_F32,), WGMMA_TF32, "tf32", 90),
    TensorCoreMode(ScalarType.float8_e4m3, (_F32,), WGMMA_FP8, "e4m3", 90),
    TensorCoreMode(ScalarType.float8_e5m2, (_F32,), WGMMA_FP8, "e5m2", 90),
    TensorCoreMode(ScalarType.float8_e4m3, (_F32,), (MMAShape.M16xN16xK32_B1,), "e4m3", 89),
    TensorCoreMode(ScalarType.float8_e5m2, (_F32,), (MMAShape.M16xN16xK32_B1,), "e5m2", 89),
    TensorCoreMode(ScalarType.int8, (ScalarType.int32,), _WMMA_16, "s8", 72),
    TensorCoreMode(ScalarType.uint8, (ScalarType.int32,), _WMMA_16, "u8", 72),
    TensorCoreMode(ScalarType.int8, (ScalarType.int32,), WGMMA_INT8, "s8", 90),
    TensorCoreMode(ScalarType.uint8, (ScalarType.int32,), WGMMA_INT8, "u8", 90),
)


@dataclass(frozen=True)
class GPUModel:
    """One row of the target table. Sizes in bytes; limits per block unless named per SM."""

    name: str
    sm: int
    sm_count: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_memory_per_sm: int
    shared_memory_max: int  # per block, with the opt-in attribute
    l2_bytes: int
    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_block_dims: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    shared_memory_static: int = 48 * 1024
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255


class Model(enum.Enum):
    """GPU models schedc knows (Accera's ``Target.Model`` names for NVIDIA parts)."""

    NVIDIA_V100 = "NVIDIA V100"
    NVIDIA_A100 = "NVIDIA A100"
    NVIDIA_RTX_A6000 = "NVIDIA RTX A6000"
    NVIDIA_L4 = "NVIDIA L4"
    NVIDIA_RTX_4090 = "NVIDIA RTX 4090"
    NVIDIA_H100 = "NVIDIA H100"
    NVIDIA_H200 = "NVIDIA H200"


MODELS: dict[Model, GPUModel] = {
    Model.NVIDIA_V100: GPUModel("NVIDIA V100", 70, 80, 2048, 32, 98304, 98304, 6 * 2**20),
    Model.NVIDIA_A100: GPUModel("NVIDIA A100", 80, 108, 2048, 32, 167936, 166912, 40 * 2**20),
    Model.NVIDIA_RTX_A6000: GPUModel(
        "NVIDIA RTX A6000", 86, 84, 1536, 16, 102400, 101376, 6 * 2**20
    ),
    Model.NVIDIA_L4: GPUModel("NVIDIA L4", 89, 58, 1536, 24, 102400, 101376, 48 * 2**20),
    Model.NVIDIA_RTX_4090: GPUModel(
        "NVIDIA RTX 4090", 89, 128, 1536, 24, 102400, 101376, 72 * 2**20
    ),
    Model.NVIDIA_H100: GPUModel("NVIDIA H100", 90, 132, 2048, 32, 233472, 232448, 50 * 2**20),
    Model.NVIDIA_H200: GPUModel("NVIDIA H200", 90, 132, 2048, 32, 233472, 232448, 60 * 2**20),
}


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


class TensorCoreInfo:
    """What the target's tensor cores can do (Accera's ``target.tensor_core_info``)."""

    def __init__(self, model: GPUModel) -> None:
        self._model = model
        self.modes = tuple(m for m in TENSOR_CORE_MODES if model.sm >= m.min_sm)
        self.supported_shapes = tuple(
            dict.fromkeys(shape for mode in self.modes for shape in mode.shapes)
        )

    def compute_tensor_splits(
        self, mma_shape: MMAShape, num_total_passes: int = 1
    ) -> tuple[int, int, int]:
        """Split sizes (m, n, k * passes) that make three loops tensorizable with ``mma_shape``."""
        where = f"compute_tensor_splits({_name(mma_shape)}, num_total_passes={num_total_passes!r})"
        if not isinstance(mma_shape, MMAShape):
            raise TargetError(where, f"mma_shape must be an MMAShape, not {mma_shape!r}")
        if isinstance(num_total_passes, bool) or not isinstance(num_total_passes, int):
            raise TargetError(where, "num_total_passes must be a positive integer")
        if num_total_passes < 1:
            raise TargetError(where, "num_total_passes must be a positive integer")
        if mma_shape not in self.supported_shapes:
            raise TargetError(where, self.missing(mma_shape))
        m, n, k = mma_shape.mnk
        return (m, n, k * num_total_passes)

    def mma_shape_to_tuple(self, mma_shape: MMAShape) -> tuple[int, int, int]:
        """(m, n, k) of one pass of ``mma_shape`` (Accera's name)."""
        if not isinstance(mma_shape, MMAShape):
            raise TargetError(f"mma_shape_to_tuple({mma_shape!r})", "mma_shape must be an MMAShape")
        return mma_shape.mnk

    def supports(self, input_type: ScalarType, output_type: ScalarType, shape: MMAShape,
                 num_total_passes: int = 1, num_fused_passes: int | None = None) -> bool:
        """Whether the tensor cores multiply ``input_type`` into ``output_type`` with ``shape``
        (Accera's name); the passes must be positive, the fused ones dividing the total."""
        fused = num_total_passes if num_fused_passes is None else num_fused_passes
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (num_total_passes, fused)):
            return False
        if num_total_passes % fused:
            return False
        try:
            self.mode_for(input_type, output_type, shape)
        except LookupError:
            return False
        return True

    def missing(self, mma_shape: MMAShape) -> str:
        """Why this target has no ``mma_shape``, with the nearest shape it has for each operand
        type (the shapes differ: k16 for 16-bit operands, k8 for tf32, k32 for 8-bit integers).

        >>> info = Target(Target.Model.NVIDIA_A100).tensor_core_info
        >>> info.missing(MMAShape.M16xN16xK4_B1).split("has: ")[1].split("; ")
        ['M16xN16xK16_B1 for float16, bfloat16, int8 and uint8', 'M16xN16xK8_B1 for float32 (tf32)']
        """
        kind = "" if mma_shape in NVIDIA_SHAPES else " (an AMD MFMA shape)"
        shapes: dict[str, list[MMAShape]] = {}  # by operand type
        for mode in self.modes:
            name = mode.operand.value + (" (tf32)" if mode.precision == "tf32" else "")
            shapes.setdefault(name, []).extend(mode.shapes)
        nearest: dict[MMAShape, list[str]] = {}
        for name, offered in shapes.items():
            nearest.setdefault(min(offered, key=lambda s: (_distance(s, mma_shape), s.value)), []).append(name)
        offers = "; ".join(f"{shape.value} for {_listed(names)}" for shape, names in nearest.items())
        newer = [m for m in TENSOR_CORE_MODES if mma_shape in m.shapes and m.min_sm > self._model.sm]
        if newer:  # a shape of newer tensor cores
            types = _listed(list(dict.fromkeys(m.operand.value for m in newer)))
            kind = f" ({types} operands on sm_{min(m.min_sm for m in newer)} or newer; it is sm_{self._model.sm})"
        return f"{self._model.name} tensor cores have no {mma_shape.value}{kind}; the nearest shapes it has: {offers}"

    def mode_for(self, operand: ScalarType, accumulator: ScalarType, shape: MMAShape) -> str:
        """The mode's precision name, or the reason this combination is not supported."""
        for mode in self.modes:
            if mode.operand == operand and accumulator in mode.accumulators and shape in mode.shapes:
                return mode.precision
        raise LookupError(self._unsupported_reason(operand, accumulator, shape))

    def _unsupported_reason(
        self, operand: ScalarType, accumulator: ScalarType, shape: MMAShape
    ) -> str:
        name = self._model.name
        every = [m for m in TENSOR_CORE_MODES if m.operand == operand]
        if not every:
            return f"tensor cores do not multiply {operand.value} operands"
        here = [m for m in self.modes if m.operand == operand]
        if not here:
            need = min(m.min_sm for m in every)
            return (
                f"{name} (sm_{self._model.sm}) tensor cores do not support {operand.value} "
                f"operands (needs sm_{need} or newer)"
            )
        with_shape = [m for m in here if shape in m.shapes]
        if not with_shape:
            shapes = describe_shapes(s for m in here for s in m.shapes)
            return f"{operand.value} operands need one of the shapes {shapes}, not {shape.value}"
        mode = with_shape[0]
        accs = ", ".join(a.value for a in mode.accumulators)
        return (
            f"{operand.value} operands accumulate into {accs}, not {accumulator.value}"
        )


NVIDIA_SHAPES = (MMAShape.M16xN16xK16_B1, MMAShape.M16xN16xK8_B1, MMAShape.M32xN8xK16_B1, MMAShape.M8xN32xK16_B1,
                 MMAShape.M16xN16xK32_B1, *WGMMA_16, *WGMMA_TF32, *WGMMA_FP8)


def describe_shapes(shapes) -> str:
    """Shapes by name, wgmma's runs of n written once: ``M64xN{8..256 by 8}xK16_B1``.

    >>> describe_shapes([MMAShape.M16xN16xK16_B1, *WGMMA_16])
    'M16xN16xK16_B1, M64xN{8..256 by 8}xK16_B1'
    """
    shapes = list(dict.fromkeys(shapes))
    names = [s.value for s in shapes if s not in WGMMA_16 and s not in WGMMA_TF32 and s not in WGMMA_FP8]
    for run, k in ((WGMMA_16, 16), (WGMMA_TF32, 8), (WGMMA_FP8, 32)):
        ns = [s.mnk[1] for s in shapes if s in run]
        if ns == list(WGMMA_N):
            names.append(f"M64xN{{8..256 by 8}}xK{k}_B1")
        elif ns == [s.mnk[1] for s in WGMMA_INT8]:
            names.append(f"M64xN{{8, 16, 24, 32..256 by 16}}xK{k}_B1")
        else:
            names += [f"M64xN{n}xK{k}_B1" for n in ns]
    return ", ".join(names)


def _distance(a: MMAShape, b: MMAShape) -> float:
    """How far apart two shapes are: the sum of |log2| of their m, n and k ratios."""
    return sum(abs(math.log2(x / y)) for x, y in zip(a.mnk, b.mnk))


def _name(value: object) -> str:
    return value.name if isinstance(value, enum.Enum) else repr(value)


class Category(enum.Enum):
    """Accera's ``Target.Category``: schedc builds for GPU targets only."""

    CPU = "CPU"
    GPU = "GPU"


class Runtime(enum.Enum):
    """Accera's ``Target.Runtime``: schedc's kernels run on CUDA (NONE and DEFAULT mean CUDA)."""

    NONE = "NONE"
    DEFAULT = "DEFAULT"
    CUDA = "CUDA"
    ROCM = "ROCM"
    VULKAN = "VULKAN"
    OPENMP = "OPENMP"


# Accera's target fields that its own GPU table leaves at their defaults (CPU notions)
_ACCERA_GPU_DEFAULTS = {"architecture": None, "cache_lines": [], "cache_sizes": [], "extensions": [],
                        "num_threads": 0, "turbo_frequency_GHz": {}, "vector_bytes": 0, "vector_registers": 1}
_NO_VALUE = {
    "frequency_GHz": "schedc's targets carry no clock frequency: nothing in a GPU plan depends on it",
    "default_block_size": "Accera's documentation names it without a value (its targets have none); pick a "
                          "block within max_threads_per_block and max_block_size",
}
_FAMILY = {70: "Volta", 75: "Turing", 80: "Ampere", 86: "Ampere", 89: "Ada Lovelace", 90: "Hopper"}


class Target:
    """A GPU to compile for: ``Target(Target.Model.NVIDIA_H100)``.

    Its attributes are the model's row of the target table (``sm``, ``arch``,
    ``shared_memory_static``, ...), plus Accera's enumerations ``GridUnit``, ``MemorySpace``,
    ``Category`` and ``Runtime`` and ``tensor_core_info``. Accera's keywords: ``known_name``
    (the model or its name), ``category`` (GPU; CPU is refused), ``runtime`` (CUDA, or NONE /
    DEFAULT; ROCM, VULKAN and OPENMP are refused); ``Target(category=GPU, runtime=CUDA)`` alone
    is the default model. A model whose architecture the installed NVRTC cannot compile for (the
    V100's sm_70 with NVRTC 13) is refused here, with the range it can.
    """

    Model = Model
    GridUnit = GridUnit
    MemorySpace = MemorySpace
    Category = Category
    Runtime = Runtime

    def __init__(self, model: Model | str | None = None, category: Category | None = None,
                 runtime: Runtime | None = None, known_name: Model | str | None = None, **others) -> None:
        if model is None:
            model = known_name if known_name is not None else Model.NVIDIA_H100
        where = f"Target({_name(model)})"
        if others:
            raise TargetError(where, f"{', '.join(sorted(others))}: schedc describes a GPU by its model only "
                                     f"(known: {', '.join(m.name for m in Model)})")
        if category is not None and category is not Category.GPU:
            raise TargetError(where, f"category={_name(category)}: schedc builds for NVIDIA GPUs only (Category.GPU)")
        if runtime is not None and runtime not in (Runtime.CUDA, Runtime.NONE, Runtime.DEFAULT):
            raise TargetError(where, f"runtime={_name(runtime)}: schedc's kernels run on CUDA (Runtime.CUDA)")
        if isinstance(model, str):
            by_name = {m.value.lower(): m for m in Model} | {m.name.lower(): m for m in Model}
            if model.lower() not in by_name:
                known = ", ".join(m.name for m in Model)
                raise TargetError(f"Target({model!r})", f"unknown GPU model; known: {known}")
            model = by_name[model.lower()]
        if not isinstance(model, Model):
            raise TargetError(f"Target({model!r})", "model must be a Target.Model")
        self._set(model)

    @classmethod
    def known(cls, model: Model) -> Target:
        """The Target of a model a plan was already made for (no second NVRTC check)."""
        target = cls.__new__(cls)
        target._set(model)
        return target

    def _set(self, model: Model) -> None:
        self.model = model
        self.spec = MODELS[model]
        self.tensor_core_info = TensorCoreInfo(self.spec)

    @property
    def category(self) -> Category:
        return Category.GPU

    @property
    def runtime(self) -> Runtime:
        return Runtime.CUDA

    @property
    def num_cores(self) -> int:
        """The multiprocessors (Accera's name for a GPU's cores)."""
        return self.spec.sm_count

    def __getattr__(self, name: str):  # the table row's fields, then Accera's target fields
        spec = self.__dict__.get("spec")
        if spec is not None and hasattr(spec, name):
            return getattr(spec, name)
        if name in _ACCERA_GPU_DEFAULTS:
            return copy.copy(_ACCERA_GPU_DEFAULTS[name])
        if name in _NO_VALUE and spec is not None:
            raise TargetError(f"{self!r}.{name}", _NO_VALUE[name])
        raise AttributeError(name)

    @property
    def family(self) -> str:
        """The architecture family (Accera's field): Volta, Turing, Ampere, Ada Lovelace, Hopper."""
        return _FAMILY[self.spec.sm]

    @property
    def max_registers_per_block(self) -> int:
        """32-bit registers a block may use (Accera's name)."""
        return self.spec.registers_per_sm

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def max_shared_memory_per_block(self) -> int:
        """Bytes of shared memory a block may have (with the opt-in attribute; Accera's name)."""
        return self.spec.shared_memory_max

    @property
    def max_static_shared_memory_per_block(self) -> int:
        """Bytes of statically declared shared memory a block may have (Accera's name)."""
        return self.spec.shared_memory_static

    @property
    def max_block_size(self) -> tuple[int, int, int]:
        """The most threads a block may have along x, y and z (Accera's name)."""
        return self.spec.max_block_dims

    @property
    def arch(self) -> str:
        return f"sm_{self.spec.sm}"

    @property
    def has_async_copy(self) -> bool:
        """cp.async (global to shared without registers): sm_80 and newer."""
        return self.spec.sm >= 80

    @property
    def has_wgmma(self) -> bool:
        """wgmma and the tensor memory accelerator: sm_90a."""
        return self.spec.sm >= 90

    @property
    def has_dependent_launch(self) -> bool:
        """Programmatic dependent launch (``griddepcontrol``): a function's next kernel starts its
        blocks before the one before ends, and waits for it in the kernel: sm_90 and newer."""
        return self.spec.sm >= 90

    def __repr__(self) -> str:
        return f"Target({self.model.name})"
