"""Names of arrays and indices: the variables the script bound them to.

A script that writes ``Out[i, j] = In[i, j]`` should read ``Out`` and ``In`` in its messages and
its CUDA, not names by position. The variables come from where the script runs, through the
iteration-logic function itself (never the call stack): its globals, which for a script at
module level are the live module namespace (variables assigned after the logic, like split
indices, included), overlaid by its closure cells.

A variable names an object when it is the object's only variable, names no other object of
the function, and is usable in the generated C++ (``unusable``). Otherwise the object keeps the
name schedc gave it (``unique``: arrays by position, indices by nest position or split).

>>> unusable("In"), unusable("thread")
(None, 'thread is a name the generated CUDA uses')
>>> unique(["j", "j", "In"], ["i", "j", "A"])
['i', 'j', 'In']
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

C_KEYWORDS = frozenset({
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
    "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept",
    "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
    "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast",
    "else", "enum", "explicit", "export", "extern", "false", "final", "float", "for", "friend",
    "goto", "if", "import", "inline", "int", "long", "module", "mutable", "namespace", "new",
    "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "override", "private",
    "protected", "public", "register", "reinterpret_cast", "requires", "restrict", "return",
    "short", "signed", "sizeof", "static", "static_assert", "static_cast", "struct", "switch",
    "template", "this", "thread_local", "throw", "true", "try", "typedef", "typeid", "typename",
    "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq"
})

# Names the generated CUDA uses itself: kernel locals (schedc/codegen/cuda.py), namespaces and
# types it refers to (the runtime header schedc/codegen/runtime/schedc.cuh, nvcuda::wmma), CUDA
# built-in variables, the host launcher's calls (and every cuda* name), macros of the headers.
GENERATED = frozenset({
    "thread", "schedc_shared", "schedc", "nvcuda", "wmma", "std", "threadIdx", "blockIdx",
    "blockDim", "gridDim", "warpSize", "dim3", "half", "uint2", "uint4", "size_t", "NULL", "assert",
    "lane", "elem", "work", "tile_x", "tile_y", "tile_z",  # a persistent kernel's loop over tiles
    "warpgroup", "wg_lane", "cluster_rank", "_lane",  # a thread's warpgroup and lane in it, a block's rank
})

# Functions the launchers' translation unit declares with C linkage (CUDA's math library and the C
# library its runtime header brings in): an ``extern "C"`` launcher of the same name does not compile.
_MATH = (
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "copysign", "cos", "cosh", "cospi",
    "cyl_bessel_i0", "cyl_bessel_i1", "erf", "erfc", "erfcinv", "erfcx", "erfinv", "exp", "exp10", "exp2", "expm1",
    "fabs", "fdim", "fdivide", "floor", "fma", "fmax", "fmin", "fmod", "frexp", "hypot", "ilogb", "j0", "j1", "jn",
    "ldexp", "lgamma", "llrint", "llround", "log", "log10", "log1p", "log2", "logb", "lrint", "lround", "modf",
    "nan", "nearbyint", "nextafter", "norm", "norm3d", "norm4d", "normcdf", "normcdfinv", "pow", "rcbrt",
    "remainder", "remquo", "rhypot", "rint", "rnorm", "rnorm3d", "rnorm4d", "round", "rsqrt", "scalbln", "scalbn",
    "sin", "sincos", "sincospi", "sinh", "sinpi", "sqrt", "tan", "tanh", "tgamma", "trunc", "y0", "y1", "yn",
)
_LIBRARY = (
    "abs", "labs", "llabs", "div", "ldiv", "max", "min", "malloc", "calloc", "realloc", "free", "memcpy", "memset",
    "memmove", "memcmp", "printf", "fprintf", "sprintf", "snprintf", "puts", "exit", "abort", "atexit", "rand",
    "srand", "time", "clock", "qsort", "bsearch", "strlen", "strcmp", "strcpy", "atoi", "atof",
)
LIBRARY_FUNCTIONS = frozenset({*_MATH, *(f"{name}f" for name in _MATH), *_LIBRARY})

_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Names schedc derives from arrays and loops; its own names (fragments _c, _a0, _c_1_0) start with
# an underscore, which no name of the script does.
_DERIVED = re.compile(r".*_(shared|staged|private|edge|stage|bits|map|element|slice[0-9]+|p[0-9]+)")


def unusable(name: object) -> str | None:
    """Why ``name`` cannot name an array or loop in the generated C++; None when it can.

    >>> unusable("a-b")
    "'a-b' is not a C identifier (ASCII letters, digits and _, starting with a letter)"
    >>> unusable("int")
    'int is a C/C++ keyword'
    >>> unusable("c"), unusable("b1_0")
    (None, None)
    >>> unusable("C_p0")
    'C_p0 ends like a name schedc derives (A_shared, k_stage, C_p0, A_map, ...)'
    """
    why = unusable_function(name)
    if why is not None:
        return why
    if _DERIVED.fullmatch(name):
        return f"{name} ends like a name schedc derives (A_shared, k_stage, C_p0, A_map, ...)"
    return None


def unusable_function(name: object) -> str | None:
    """Why ``name`` cannot name a function (the C launcher ``name`` and the kernel
    ``name__gpu__``) nor anything else in the generated C++; None when it can.

    >>> unusable_function("int"), unusable_function("matmul")
    ('int is a C/C++ keyword', None)
    """
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        shown = name if isinstance(name, str) and name.isidentifier() else repr(name)
        return f"{shown} is not a C identifier (ASCII letters, digits and _, starting with a letter)"
    if "__" in name:
        return f"{name} contains __, which C++ reserves"
    if name in C_KEYWORDS:
        return f"{name} is a C/C++ keyword"
    if name in GENERATED or name.startswith("cuda"):
        return f"{name} is a name the generated CUDA uses"
    return None


def unusable_launcher(name: object) -> str | None:
    """Why ``name`` cannot name a function: ``unusable_function``'s reasons, or a function of the
    CUDA or C library of that name, which its ``extern "C"`` launcher would collide with.

    >>> unusable_launcher("norm"), unusable_launcher("layer_norm")
    ("norm is a function of CUDA's math or the C library: the C launcher norm() would collide with it", None)
    """
    why = unusable_function(name)
    if why is None and name in LIBRARY_FUNCTIONS:
        return f"{name} is a function of CUDA's math or the C library: the C launcher {name}() would collide with it"
    return why


def variables(logic: Callable) -> Iterator[tuple[str, object]]:
    """The variables ``logic`` sees, as (name, value): its closure cells, then the globals they
    do not shadow. Empty cells (variables not assigned yet) are skipped."""
    code = getattr(logic, "__code__", None)
    cells = getattr(logic, "__closure__", None) or ()
    free = code.co_freevars if code is not None else ()
    for name, cell in zip(free, cells):
        try:
            yield name, cell.cell_contents
        except ValueError:
            continue
    for name, value in getattr(logic, "__globals__", {}).items():
        if name not in free:
            yield name, value


def bound_names(objects: Iterable[object], logics: Iterable[Callable], scope: dict | None = None) -> dict[int, str]:
    """``id(object)`` → its variable, for each of ``objects`` bound to exactly one variable
    that is usable and bound to no other of ``objects``, in the scopes of ``logics`` and in
    ``scope`` (a calling frame's variables)."""
    ours = {id(o) for o in objects}
    names_of: dict[int, set[str]] = {}
    objects_of: dict[str, set[int]] = {}
    for name, value in [pair for logic in logics for pair in variables(logic)] + list((scope or {}).items()):
        if id(value) in ours:
            names_of.setdefault(id(value), set()).add(name)
            objects_of.setdefault(name, set()).add(id(value))
    found = {}
    for key, names in names_of.items():
        name, *others = sorted(names)
        if not others and len(objects_of[name]) == 1 and unusable(name) is None:
            found[key] = name
    return found


def unique(wanted: list[str | None], fallback: list[str | None]) -> list[str | None]:
    """Each entry's wanted name, or its fallback where the name is shared with another entry.

    Fallbacks are distinct, so reverting the entries that clash (repeatedly: a fallback can
    clash with a wanted name) ends with distinct names, except among clashing fallbacks, which
    the caller reports. None is no name and clashes with nothing.

    >>> unique(["i", "ii", "ii"], ["i", "jj", "kk"])
    ['i', 'jj', 'kk']
    """
    names = list(wanted)
    while True:
        counts = Counter(n for n in names if n is not None)
        clash = [n for n, name in enumerate(names) if counts[name] > 1 and name != fallback[n]]
        if not clash:
            return names
        for n in clash:
            names[n] = fallback[n]


def name_objects(objects: list, fallback: list[str | None], logics: Iterable[Callable],
                 avoid: frozenset[str] = frozenset(), scope: dict | None = None) -> None:
    """Set the ``name`` of ``objects`` (Arrays and Indices of one function): an array's explicit
    name; else the object's variable in the scopes of ``logics`` (and ``scope``); else the name
    it has; else its ``fallback``. Names in ``avoid`` or shared by two objects are replaced by the
    fallbacks."""
    found = _scoped_names([o for o in objects if _explicit(o) is None], list(logics), scope)
    wanted = []
    for o, back in zip(objects, fallback):
        name = _explicit(o) or found.get(id(o)) or o.name or back
        wanted.append(back if name in avoid and _explicit(o) is None else name)
    for o, name in zip(objects, unique(wanted, fallback)):
        o.name = name


def name_arrays_in_scope(arrays: list, logics: list[Callable]) -> None:
    """Name ``arrays`` (without names) after their variables in the scopes of ``logics`` and the
    functions they call, where one variable names each: an error before ``Package.add`` then says
    ``bias[j]``, not ``<float16[128] array>[j]``."""
    found = _scoped_names(arrays, logics)
    for array in arrays:
        if id(array) in found:
            array.name = found[id(array)]


def _scoped_names(objects: list, logics: list[Callable], scope: dict | None = None) -> dict[int, str]:
    """``bound_names`` in the scopes of ``logics`` and ``scope``, then, for the objects those do
    not name, in the scopes of the functions they call (a library's nest applying the script's
    epilogue, which reads the script's arrays)."""
    found = bound_names(objects, logics, scope)
    found.update(bound_names([o for o in objects if id(o) not in found], _callees(logics)))
    return found


def _callees(logics: list[Callable]) -> list[Callable]:
    """The functions the ``logics`` see in their closures (one level), each once."""
    seen: dict[int, Callable] = {}
    for logic in logics:
        for _, value in variables(logic):
            if callable(value) and hasattr(value, "__code__") and value not in logics:
                seen.setdefault(id(value), value)
    return list(seen.values())


def name_function(arrays: list, args: tuple, indices: list, logics: Iterable[Callable],
                  function: str = "") -> None:
    """Name one function's ``arrays`` (``args`` first) and ``indices`` (its schedule's loops);
    no name equals ``function``. See ``name_objects`` and ``array_fallbacks``."""
    fallback = [*array_fallbacks(arrays, args), *(index.default_name for index in indices)]
    name_objects([*arrays, *indices], fallback, logics, frozenset({function}))


def array_fallbacks(arrays: list, args: tuple) -> list[str | None]:
    """Names of ``arrays`` without a variable: the explicit name; in ``args``, by position
    (A, B, C, ..., Z, A1, B1, ..., skipping names given explicitly); CONST and TEMP arrays const0,
    temp0, ...; None for another array (one missing from args, which the Model refuses).

    >>> import schedc as acc
    >>> arrays = [acc.Array(role=acc.Role.INPUT, element_type=acc.ScalarType.float32, shape=(1,)) for _ in range(28)]
    >>> array_fallbacks(arrays, tuple(arrays))[24:]
    ['Y', 'Z', 'A1', 'B1']
    """
    taken = {a.explicit_name for a in arrays if a.explicit_name}
    letters = (name for name in _letters() if name not in taken)
    counters = {"const": 0, "temp": 0}
    fallback: list[str | None] = []
    for array in arrays:
        name, role = array.explicit_name, array.role.value
        if name is None and any(array is a for a in args):
            name = next(letters)
        elif name is None and role in counters:
            name = f"{role}{counters[role]}"
            counters[role] += 1
        fallback.append(name)
    return fallback


def _letters() -> Iterator[str]:
    """A, ..., Z, A1, ..., Z1, A2, ...: positional names without end."""
    for round_ in itertools.count():
        for c in range(ord("A"), ord("Z") + 1):
            yield chr(c) + (str(round_) if round_ else "")


def name_indices(indices: list, logics: Iterable[Callable], scope: dict | None = None) -> None:
    """Rename a nest's ``indices`` after their variables (see ``name_objects``); the fallback of
    an index is the name the nest or the split gave it."""
    name_objects(indices, [index.default_name for index in indices], logics, scope=scope)


def name_in_use(indices: list, logics: Iterable[Callable], arguments: object, index_type: type,
                scope: dict | None = None) -> None:
    """Before a scheduling call: a schedule's ``indices`` named after the variables bound to them
    by now in the scopes of ``logics`` and of the calling code (``scope``: a plan built inside a
    function binds its loops there), and any index among ``arguments`` that is not one of them
    (another nest's, which the call refuses by name) after its own nest's."""
    if indices:
        name_indices(indices, logics, scope)
    ours = {id(i) for i in indices}
    for other in _indices_in(arguments, index_type):
        if id(other) not in ours and hasattr(other.owner, "logic"):
            name_objects([other], [other.name], other.owner.logic)


def _indices_in(value: object, index_type: type) -> Iterator:
    if isinstance(value, index_type):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _indices_in(key, index_type)
            yield from _indices_in(item, index_type)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _indices_in(item, index_type)


def _explicit(o: object) -> str | None:
    return getattr(o, "explicit_name", None)
