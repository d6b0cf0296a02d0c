"""Parameters (Accera's ``acc.create_parameters``): values chosen when a function is added.

A parameter stands for a number (a shape, a split factor, a tile size, a stage count), an
index (a cache's index), a loop order (a tuple of indices) or any other argument of the
scheduling calls. Objects that receive one are *deferred*: ``Array``, ``Nest``, ``Schedule``
and ``Plan`` record every call made on them (and return placeholder indices and cache handles),
and ``Package.add(plan, args, parameters={P0: 64, ...})`` replays the recorded calls with the
values, so that every check runs on the concrete plan, as if the script had been written with
those numbers. A list of such dicts (``create_parameter_grid``, in ``grid.py``) adds one function per point.

>>> import schedc as acc
>>> m, tile = acc.create_parameters()
>>> (m.name, tile.name, str(2 * tile + 1))
('m', 'tile', '2 * tile + 1')
>>> grid = acc.create_parameter_grid({m: [64, 128], tile: [16, 32]}, filter_func=lambda m, t: t < m // 2)
>>> [(p[m], p[tile]) for p in grid]
[(64, 16), (128, 16), (128, 32)]
"""

from __future__ import annotations

import dataclasses
import dis
import enum
import functools
import operator
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import SchedcError

_OPERATORS: dict[str, Callable] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "**": operator.pow, "<<": operator.lshift, ">>": operator.rshift, "&": operator.and_,
    "|": operator.or_, "^": operator.xor, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "neg": operator.neg, "abs": abs,
}


class ParameterError(SchedcError):
    """A parameter used without a value, or a value the scheduling calls refuse."""


class Logic:
    """Base of the iteration logic's nodes (expressions and statements): records whose fields
    may hold parameters, which a replay substitutes. Arithmetic between a parameter and a node
    is the node's to define."""

    __slots__ = ()


class Parameter:
    """A placeholder for a value given at ``Package.add(..., parameters=...)``; arithmetic on
    parameters makes a parameter computed from theirs (``2 * tile``). Compares by identity."""

    def __init__(self, name: str, op: str = "", operands: tuple = ()) -> None:
        self.name = name
        self.op = op
        self.operands = operands

    def value(self, values: Mapping[Parameter, object]) -> object:
        """Its value under ``values`` (a dict of parameter: value); ParameterError names a
        parameter that has none."""
        if not self.op:
            if self not in values:
                raise ParameterError(f"parameter {self.name}", "has no value: give it one in "
                                                               "Package.add(..., parameters={...})")
            return values[self]
        args = [a.value(values) if isinstance(a, Parameter) else a for a in self.operands]
        return _OPERATORS[self.op](*args)

    def leaves(self) -> list[Parameter]:
        """The parameters created by ``create_parameters`` this one is computed from."""
        if not self.op:
            return [self]
        return [leaf for a in self.operands if isinstance(a, Parameter) for leaf in a.leaves()]

    def __str__(self) -> str:
        if not self.op:
            return self.name
        if len(self.operands) == 1:
            return f"{'-' if self.op == 'neg' else self.op}({self.operands[0]})"
        return f"{self.operands[0]} {self.op} {self.operands[1]}"

    __repr__ = __str__  # messages show the script's expression: split(i, tile)

    def __bool__(self) -> bool:
        raise ParameterError(f"parameter {self}", "has no value while the script runs, so it cannot decide an if "
                                                  "or an and/or; use filter_func of create_parameter_grid for "
                                                  "conditions on parameter values")

    def __index__(self) -> int:
        raise ParameterError(f"parameter {self}", "has no value while the script runs; pass the parameter itself "
                                                  "to the scheduling call, which takes its value at Package.add")

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:  # identity, as dict keys need
        return self is other


def _binary(op: str, reflected: bool = False):
    def method(self, other):
        if isinstance(other, Logic):  # in iteration logic: the expression takes the parameter
            return NotImplemented
        return Parameter("", op, (other, self) if reflected else (self, other))
    return method


for _op, _name in (("+", "add"), ("-", "sub"), ("*", "mul"), ("/", "truediv"), ("//", "floordiv"), ("%", "mod"),
                   ("**", "pow"), ("<<", "lshift"), (">>", "rshift"), ("&", "and"), ("|", "or"), ("^", "xor")):
    setattr(Parameter, f"__{_name}__", _binary(_op))
    setattr(Parameter, f"__r{_name}__", _binary(_op, reflected=True))
for _op, _name in (("<", "lt"), ("<=", "le"), (">", "gt"), (">=", "ge")):
    setattr(Parameter, f"__{_name}__", _binary(_op))
Parameter.__neg__ = lambda self: Parameter("", "neg", (self,))
Parameter.__abs__ = lambda self: Parameter("", "abs", (self,))


def create_parameters(count: int | None = None) -> Parameter | tuple[Parameter, ...]:
    """Parameters named after the variables the call is assigned to: ``m, n = create_parameters()``
    (or ``P = create_parameters()``: one parameter). Accera's older ``create_parameters(count)``
    is accepted too."""
    names = _assigned_names(sys._getframe(1))
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ParameterError(f"create_parameters({count!r})", "count must be a positive integer")
        if names is None or len(names) != count:
            names = [f"P{n}" for n in range(count)]
    return one_per_name(names, Parameter, ParameterError("create_parameters()", _ASSIGN.format(
        example="m, n, k = acc.create_parameters()", what="parameters")))


_ASSIGN = "assign the result to variables, as in `{example}`: their names name the {what} and say how many there are"


def one_per_name(names: list[str] | None, make, refusal: Exception):
    """``make(name)`` for each variable the call is assigned to: one object, or a tuple of
    them; ``refusal`` raised where the call is assigned to no variables."""
    if not names:
        raise refusal
    made = tuple(make(name) for name in names)
    return made if len(made) > 1 else made[0]


def assigned_names(frame) -> list[str] | None:
    """The variables the call running at ``frame`` is assigned to (``a, b = call()``)."""
    return _assigned_names(frame)


_STORES = {"STORE_NAME", "STORE_FAST", "STORE_GLOBAL", "STORE_DEREF"}


def _assigned_names(frame) -> list[str] | None:
    """The variables that the call running at ``frame`` is assigned to (``a, b = call()``)."""
    code = frame.f_code
    after = [i for i in dis.get_instructions(code) if i.offset > frame.f_lasti and i.opname != "CACHE"]
    if not after:
        return None
    first = after[0]
    if first.opname in _STORES:
        return [first.argval]
    if first.opname != "UNPACK_SEQUENCE":
        return None
    names: list[str] = []
    for instruction in after[1:]:
        if instruction.opname in _STORES:
            names.append(instruction.argval)
        elif instruction.opname == "STORE_FAST_STORE_FAST":
            names.extend(instruction.argval)
        else:
            return None
        if len(names) >= first.arg:
            return names[:first.arg]
    return None


def has_parameter(value: object) -> bool:
    """Whether ``value`` is a parameter or a tuple, list or dict holding one."""
    if isinstance(value, Parameter):
        return True
    if isinstance(value, tuple | list):
        return any(has_parameter(v) for v in value)
    if isinstance(value, Mapping):
        return any(has_parameter(k) or has_parameter(v) for k, v in value.items())
    return False


def parameters_in(*values: object) -> list[Parameter]:
    """The parameters made by ``create_parameters`` that ``values`` hold, once each, in the order
    the script used them: in numbers and tuples, and in the recorded calls of the arrays, nests,
    schedules and plans among them (and of the objects those were made from)."""
    found: list[Parameter] = []
    seen: set[int] = set()

    def visit(value: object) -> None:
        if isinstance(value, Parameter):
            found.extend(leaf for leaf in value.leaves() if all(leaf is not f for f in found))
        elif isinstance(value, tuple | list):
            for v in value:
                visit(v)
        elif isinstance(value, Mapping):
            for kv in value.items():
                visit(kv)
        elif _is_tree(value):
            for f in dataclasses.fields(value):
                visit(getattr(value, f.name))
        elif getattr(value, "_recording", None) is not None and id(value) not in seen:
            seen.add(id(value))
            recording: Recording = value._recording
            visit(recording.parent)
            visit((recording.origin.args, recording.origin.kwargs))
            for call in recording.calls:
                visit((call.args, call.kwargs))

    visit(values)
    return found


# -- recording and replay ----------------------------------------------------------------------


@dataclass
class Call:
    """A method call made on a recorded object: replayed on its concrete counterpart."""

    method: str
    args: tuple
    kwargs: dict
    result: object = None


@dataclass
class Recording:
    """What an object was made from and the calls made on it, and whether it is deferred (a
    parameter reached it, so its calls are recorded and not run)."""

    origin: Call
    parent: object = None  # the object whose method made it (None: a constructor)
    calls: list[Call] = field(default_factory=list)
    deferred: bool = False


def deferred(obj: object) -> bool:
    recording = getattr(obj, "_recording", None)
    return recording is not None and recording.deferred


@dataclass
class Replay:
    """One point's values and the concrete objects made for the deferred ones so far."""

    values: Mapping[Parameter, object]
    made: dict[int, object] = field(default_factory=dict)  # id(original) -> concrete
    keep: list = field(default_factory=list)  # the originals, so that their ids stay theirs

    def resolve(self, value: object) -> object:
        """``value`` with parameters replaced by their values and deferred objects (arrays,
        indices, cache handles) by their concrete counterparts."""
        if isinstance(value, Parameter):
            return self.resolve(value.value(self.values))
        if isinstance(value, tuple | list):
            return type(value)(self.resolve(v) for v in value)
        if isinstance(value, Mapping):
            return {self.resolve(k): self.resolve(v) for k, v in value.items()}
        if id(value) in self.made:
            return self.made[id(value)]
        if deferred(value):
            return self.object(value)
        if _is_tree(value):  # a statement of iteration logic: its arrays and indices replaced
            fields = {f.name: self.resolve(getattr(value, f.name)) for f in dataclasses.fields(value)}
            return dataclasses.replace(value, **fields)
        return value

    def remember(self, original: object, concrete: object) -> None:
        """``original`` (an object, or a tuple of them, a call returned) is ``concrete`` now."""
        if isinstance(original, tuple | list) and isinstance(concrete, tuple | list):
            for o, c in zip(original, concrete):
                self.remember(o, c)
        elif original is not None:
            self.made[id(original)] = concrete
            self.keep.append(original)
            name = getattr(original, "name", None)
            if isinstance(name, str) and hasattr(concrete, "name") and not hasattr(concrete, "__dataclass_fields__"):
                concrete.name = name  # arrays and indices keep the names the script gave them

    def object(self, original: object) -> object:
        """The concrete counterpart of a deferred ``original``: its maker replayed, then its calls."""
        if id(original) in self.made:
            return self.made[id(original)]
        recording: Recording = original._recording
        origin = recording.origin
        if recording.parent is None:
            concrete = type(original)._replayed(self, *self.resolve(origin.args), **self.resolve(origin.kwargs))
        else:
            parent = self.resolve(recording.parent)
            concrete = getattr(parent, origin.method)(*self.resolve(origin.args), **self.resolve(origin.kwargs))
        self.remember(original, concrete)
        hook = getattr(original, "_replay_made", None)
        if hook is not None:
            hook(self, concrete)
        for call in recording.calls:
            result = getattr(concrete, call.method)(*self.resolve(call.args), **self.resolve(call.kwargs))
            self.remember(call.result, result)
        return concrete


def _is_tree(value: object) -> bool:
    return isinstance(value, Logic) and dataclasses.is_dataclass(value)


def describe(point: Mapping[Parameter, object]) -> str:
    """``m=64, tile=16``: a point's values as a message shows them."""
    return ", ".join(f"{p.name}={show_value(v)}" for p, v in point.items())


ParameterValue = int | float | bool | str


def typed_value(value: object) -> ParameterValue:
    """A parameter's value as the .hat and a loaded function's ``.parameters`` keep it: numbers
    and bools as themselves, anything else (indices, orders, enums) as ``show_value`` writes it.

    >>> typed_value(16), typed_value(0.5), typed_value((1, 2))
    (16, 0.5, '(1, 2)')
    """
    if isinstance(value, bool | int | float) and not isinstance(value, enum.Enum):
        return value
    if hasattr(value, "dtype") and getattr(value, "shape", None) == ():  # a numpy number
        return value.item()
    return show_value(value)


def show_value(value: object) -> str:
    """A parameter's value as messages and the .hat show it: ``16``, ``(i, j, k)``,
    ``MMAShape.M16xN16xK16_B1``."""
    if isinstance(value, tuple | list):
        return "(" + ", ".join(show_value(v) for v in value) + ")"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else repr(value)


def _script_scope(frame) -> dict[str, object]:
    """The variables of the script's code that made a scheduling call, the first frame outside
    schedc (a plan built inside a function binds its indices there, where the iteration logic
    does not see them; a fused schedule's own methods call the recorded ones), past
    comprehensions (``[s.split(j, 32) for j in rows]`` would name each row's loop ``j``); none
    where no such frame is found."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        inner = frame.f_code.co_name in _COMPREHENSIONS  # its loop variable names each item in turn
        if module != "schedc" and not module.startswith("schedc.") and not inner:
            return dict(frame.f_locals)
        frame = frame.f_back
    return {}


_COMPREHENSIONS = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})


def recorded(placeholder: Callable | None = None):
    """Decorator of a scheduling method: the call is recorded (for ``Replay``); when the object
    is deferred, or a parameter is among the arguments (which defers it), ``placeholder`` runs
    instead of the method (the method itself when None: it does nothing a parameter affects),
    returning placeholder indices or handles. Calls a recorded method makes are not recorded.
    Before the outermost call the object's ``_name_indices(arguments, scope)``, where it has one,
    names the indices after the script's variables bound to them by then (a split's index is bound
    to its variable only after ``split`` returns), in the iteration logic's scopes and in the
    calling code's (``scope``), so that a message names them as the script does."""
    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            if not getattr(self, "_in_call", False):  # the indices as the script calls them, for messages
                getattr(self, "_name_indices", lambda *_: None)((args, kwargs), _script_scope(sys._getframe(1)))
            recording: Recording | None = getattr(self, "_recording", None)
            if recording is None:
                return method(self, *args, **kwargs)
            if has_parameter((args, kwargs)):
                recording.deferred = True
            run = placeholder if recording.deferred and placeholder is not None else method
            if getattr(self, "_in_call", False):
                return run(self, *args, **kwargs)
            self._in_call = True
            try:
                result = run(self, *args, **kwargs)
            finally:
                self._in_call = False
            recording.calls.append(Call(method.__name__, args, kwargs, result))
            return result
        return wrapper
    return decorate
