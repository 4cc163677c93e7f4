"""Where a Function keeps what it was given outside ``ctx.save_for_backward``: the measuring half of ``check_saved``'s rule.

A tensor of the call (an input, a view or a copy of one, anything forward made) kept on ``ctx`` or in a
container there, in a module-level or class-level container, a closure, a default argument or a function
attribute, is held where autograd can neither check it nor free it, and an exercise about what to save
is then not done. So are the call's values kept in any other form: the input's or the output's numbers as a
list of Python floats (``x.tolist()``), numpy scalars or arrays, the bytes of the tensor (``tobytes()``), a
string that writes them (``str(x.tolist())``, ``float.hex``), the raw bits as integers.

``ForwardWatch`` measures one forward call: the tensors it made that outlive it (the garbage collector's
youngest generation, with collection paused during the call), every other object it made that outlives it,
and the references to its inputs it added (reference counts, less the one torch itself adds when C++ holds a
tensor). ``kept_places`` then finds each kept tensor by walking what the Function reaches by name (ctx, its
class, its methods' closures, defaults and attributes, its module's names) and, failing that, the garbage
collector's referrers; on ``ctx`` every tensor counts, whatever made it. On the same walk, and among the
objects forward made that outlive it, it reads every number, string, bytes and array it meets
(``CallValues``): a place that holds two of a tensor's values (its one value, for a single number) keeps
them. The walk reads containers and attributes with the builtin types' own methods, so no code of the
student's runs.

It uses ``gc.get_objects`` (the youngest generation, twice a call), ``gc.get_referents`` on what forward made,
reads student functions' ``__defaults__`` and ``__kwdefaults__`` (the ``object.__getattr__`` audit event), and
calls ``gc.get_referrers`` only for what is kept where no name leads.
"""

from __future__ import annotations

import builtins
import collections
import functools
import gc
import re
import sys
import types

from autograder.student.checker.references import _equal, _Tensor
from autograder.student.checker.values import CallValues, form_of

_get_objects, _get_referrers, _get_referents, _gc_enable, _gc_disable, _gc_isenabled, _gc_stats = (
    gc.get_objects, gc.get_referrers, gc.get_referents, gc.enable, gc.disable, gc.isenabled, gc.get_stats)
_refcount = sys.getrefcount
_use_count = _Tensor._use_count
_CONTAINERS = (dict, list, tuple, set, frozenset, collections.deque)
_ATOMS = (int, float, complex, str, bytes, bool, type(None), range, slice)
_MACHINERY = ("torch", "builtins", "abc", "typing", "types", "IPython", "ipykernel", "jupyter_client", "traitlets",
              "zmq", "tornado", "asyncio", "autograder", "triton", "numpy")
_SKIPPED = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
                      "_backward_cls", "__slotnames__", "__firstlineno__", "__static_attributes__"})
_BUDGET = 20_000  # objects the walk visits at most


def _is_array(obj) -> bool:
    """A numpy array (it keeps memory as a tensor does), told by its type alone."""
    kind = type(obj)
    return kind.__name__ == "ndarray" and kind.__module__ == "numpy"


def _young_tensors() -> list:
    return [o for o in _get_objects(0) if issubclass(type(o), _Tensor)]


def _collections() -> list[int]:
    return [generation["collections"] for generation in _gc_stats()]


def _python_references(tensor) -> int:
    """Python's references to ``tensor``, less the one torch adds while C++ holds the tensor too."""
    return _refcount(tensor) - (1 if _use_count(tensor) > 1 else 0)


class ForwardWatch:
    """One forward call measured: ``made``, the tensors it made that are alive after it, ``made_other``, the other
    objects it made that are (those the garbage collector tracks: containers, cells, functions, instances), and for
    each input tensor the references it gained (``gained(holders)``, less the ones in the checker's own ``holders``)."""

    def __init__(self, call: list) -> None:
        self.inputs = [a for a in call if isinstance(a, _Tensor)]
        self.made: list = []
        self.made_other: list = []
        self.disturbed = False

    def __enter__(self) -> "ForwardWatch":
        self.enabled = _gc_isenabled()
        _gc_disable()  # what forward makes stays in the youngest generation, where the check looks
        self.collected = _collections()
        self.counts = [_python_references(t) for t in self.inputs]  # (before the list below holds some of them)
        self.before = _get_objects(0)  # held, so that no new object takes the id of one of these
        return self

    def __exit__(self, *exc) -> None:
        try:
            known = {id(o) for o in self.before}
            known.add(id(self.before))
            young = [o for o in _get_objects(0) if id(o) not in known]
            self.made = [o for o in young if issubclass(type(o), _Tensor)]
            self.made_other = [o for o in young if not issubclass(type(o), _Tensor) and type(o) is not types.FrameType]
            self.disturbed = _collections() != self.collected  # forward ran the garbage collector itself
        finally:
            self.before = []
            if self.enabled:
                _gc_enable()

    def gained(self, holders: list) -> list[int]:
        """References each input gained in forward, less those in ``holders`` (outputs and saved tensors)."""
        now = [_python_references(t) for t in self.inputs]  # (counted as in __enter__, no other name for t alive)
        return [after - before - sum(h is t for held in holders for h in held)
                for t, before, after in zip(self.inputs, self.counts, now)]


def kept_places(function, node, call: list, names: list[str], outputs: tuple, saved: list,
                watch: ForwardWatch) -> list[tuple[str, str]]:
    """(what, where) for each tensor of the call kept outside ``ctx.save_for_backward`` (at most 5)."""
    gained = watch.gained([outputs, saved])  # first: every list made from here on holds inputs too
    kept_inputs = [t for t, count in zip(watch.inputs, gained) if count > 0]
    legitimate = [*outputs, *saved]
    legitimate += [t._base for t in legitimate if isinstance(t, _Tensor) and t._base is not None]
    made = [t for t in watch.made if not any(t is k for k in legitimate)]
    targets = {id(t): t for t in [*kept_inputs, *made]}
    values = CallValues([(f"the input `{names[i]}`", a) for i, a in enumerate(call) if isinstance(a, _Tensor)]
                        + [("the output" if len(outputs) == 1 else f"output {k + 1}", o)
                           for k, o in enumerate(outputs) if isinstance(o, _Tensor)],
                        [a for a in call if not isinstance(a, _Tensor)])
    found, carried = _walk(function, node, targets, _storages([*watch.inputs, *made]), values)
    places = [(_what(obj, call, names, outputs, made), where) for obj, where in found]
    located = {id(obj) for obj, _ in found}
    unlocated = [t for i, t in targets.items() if i not in located]
    for i in range(min(len(unlocated), 5 - len(places))):
        where = _held_by(unlocated[i])
        # An input's gained reference is certain; a tensor forward made may be held by torch alone.
        if where is not None or any(unlocated[i] is t for t in kept_inputs):
            places.append((_what(unlocated[i], call, names, outputs, made), where or "a place the check cannot name"))
    seen = {i for objects, _ in carried for i in objects}
    places += [(what, where) for _, (what, where) in carried][:max(0, 5 - len(places))]
    for obj in watch.made_other if len(places) < 5 and values else ():
        inside = [r for r in _referents(obj) if id(r) not in seen and values.numbers(r) is not None]
        tensor = values.held([values.numbers(r) for r in inside]) if id(obj) not in seen else None
        if tensor:  # an object forward made, still alive, that no name leads to (a cache, a closure made in forward)
            places.append((f"the values of {tensor} ({form_of(inside)})",
                           _held_by(obj) or "a place the check cannot name (forward made it, and it outlives forward)"))
            if len(places) >= 5:
                break
    if watch.disturbed:
        places.append(("whatever forward made", "a place the check cannot see: forward ran Python's garbage "
                                                "collector, which hides it"))
    return places[:5]


def _what(obj, call: list, names: list[str], outputs: tuple, made: list) -> str:
    """What a kept object is, in a student's words: an input, a view or a copy of one, an output, a tensor."""
    if _is_array(obj):
        return "its values, as a numpy array"
    tensors = [(i, a) for i, a in enumerate(call) if isinstance(a, _Tensor)]
    for i, a in tensors:
        if obj is a:
            return f"the input `{names[i]}`"
    for k, o in enumerate(outputs):
        if obj is o:
            return "the output" if len(outputs) == 1 else f"output {k + 1}"
    for i, a in tensors:
        if _same_storage(obj, a):
            return f"a view of the input `{names[i]}`"
    for i, a in tensors:
        if obj.shape == a.shape and obj.dtype == a.dtype and obj.device == a.device and _equal(obj, a):
            return f"a copy of the input `{names[i]}`"
    made_here = "made in forward: " if any(obj is m for m in made) else ""
    return f"{made_here}{str(obj.dtype).removeprefix('torch.')}, shape {list(obj.shape)}"


def _same_storage(a, b) -> bool:
    try:
        pointer = a.untyped_storage().data_ptr()
        return pointer != 0 and pointer == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # meta tensors and tensor subclasses without storage
        return False


def _storages(tensors: list) -> list[tuple[int, int]]:
    """(start, end) of the memory of each tensor: a numpy array inside one of them belongs to the call."""
    spans = []
    for t in tensors:
        try:
            storage = t.untyped_storage()
            if storage.data_ptr():
                spans.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
        except (RuntimeError, NotImplementedError):
            pass
    return spans


def _walk(function, node, targets: dict, spans: list, values: "CallValues") -> tuple[list, list]:
    """(object, where) for the call's tensors (``targets``, numpy arrays in ``spans``) found by name, and every
    tensor or array on ``ctx``: breadth first from ctx, then the Function's classes, then its module's names;
    and (the ids of the objects, (what, where)) for each place found holding the call's values (``values``)."""
    classes = [c for c in type.__getattribute__(function, "__mro__") if not _library(c)]
    module = _module_names(classes)
    phases = [[(node, "ctx", "`ctx`")] if node is not None else [],
              [(c, c.__name__, f"the class attribute `{c.__name__}`") for c in classes],
              [(value, name, _global_place(name, value)) for name, value in list(dict.items(module))
               if isinstance(name, str) and not name.startswith("_i") and name not in ("In", "Out", "_", "__", "___")
               and not name.startswith("__") and not isinstance(value, types.ModuleType)]]
    seen, found, budget = set(), [], _BUDGET
    numbers: dict[str, tuple[list, list]] = {}  # a place -> (the objects there that hold numbers, the numbers)
    for on_ctx, roots in zip((True, False, False), phases):
        todo = collections.deque((obj, path, where, on_ctx) for obj, path, where in roots)
        while todo and budget and len(found) < 5:
            obj, path, where, here = todo.popleft()
            if id(obj) in seen:
                continue
            read = values.numbers(obj) if values else None
            if read is not None and len(read):
                place = f"`{_root(path)}`" if here else where
                held = numbers.setdefault(place, ([], []))
                held[0].append(obj)
                held[1].append(read)
            if isinstance(obj, _ATOMS):
                continue
            seen.add(id(obj))
            budget -= 1
            if isinstance(obj, _Tensor) or _is_array(obj):
                if (here and path != "ctx") or id(obj) in targets or (_is_array(obj) and _inside(obj, spans)):
                    found.append((obj, f"`{path}`" if here else where))
                continue
            for step, child, place in _children(obj, path, where, module, here):
                todo.append((child, step, place or where, here and place is None))
    carried = []
    for place, (objects, read) in numbers.items():
        tensor = values.held(read)
        if tensor:
            carried.append(({id(o) for o in objects}, (f"the values of {tensor} ({form_of(objects)})", place)))
    return found, carried


def _root(path: str) -> str:
    """The attribute of ``ctx`` a path on it starts with (``ctx.values[3]`` is in ``ctx.values``)."""
    found = re.match(r"ctx(\.[A-Za-z_][A-Za-z0-9_]*)?", path)
    return found.group() if found else path


def _referents(obj) -> list:
    """What ``obj`` holds directly, as the garbage collector sees it (no code of the student's runs); a module's
    names are not its own."""
    return [r for r in _get_referents(obj) if not (isinstance(r, dict) and r is getattr(obj, "__globals__", None))]


def _library(cls) -> bool:
    """A class of torch's, Python's or the notebook's machinery (its attributes are not the student's)."""
    module = vars(cls).get("__module__", "")
    if module == "builtins":  # also where a class made by exec() without __name__ says it comes from
        return vars(builtins).get(cls.__name__) is cls
    return not isinstance(module, str) or module.split(".")[0] in _MACHINERY


def _module_names(classes: list) -> dict:
    """The names of the module the Function was written in (a notebook's, the examinee's answers'): its methods'
    globals."""
    for cls in classes:
        for method in ("forward", "backward", "setup_context", "vjp"):
            raw = vars(cls).get(method)
            raw = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            if isinstance(raw, types.FunctionType):
                return raw.__globals__
    return {}


def _global_place(name: str, value) -> str:
    """How a module-level name is called in a message: ``the module-level dict `_cache```."""
    if isinstance(value, _CONTAINERS):
        kind = f"{type(value).__name__} "
    elif isinstance(value, type):
        kind = "class "
    elif isinstance(value, types.FunctionType):
        kind = "function "
    elif isinstance(value, _Tensor) or _is_array(value) or callable(value):
        kind = "name "
    else:
        kind = "object "
    return f"the module-level {kind}`{name}`"


def _children(obj, path: str, where: str, module: dict, on_ctx: bool) -> list[tuple[str, object, str | None]]:
    """(path, child, a new place or None) for what ``obj`` holds, read without running the student's code.
    Outside ctx, objects of torch's or the notebook's machinery are not opened."""
    if isinstance(obj, dict):
        pairs = list(dict.items(obj))
        return ([(f"{path}[{_key(k)}]", v, None) for k, v in pairs]
                + [(f"{path} (a key)", k, None) for k, _ in pairs
                   if not isinstance(k, _ATOMS) or isinstance(k, (float, str, bytes))])
    for kind in (list, tuple, collections.deque):
        if isinstance(obj, kind):
            return [(f"{path}[{i}]", v, None) for i, v in enumerate(kind.__iter__(obj))]
    for kind in (set, frozenset):
        if isinstance(obj, kind):
            return [(f"{path} (an element)", v, None) for v in kind.__iter__(obj)]
    if isinstance(obj, (staticmethod, classmethod)):
        return [(path, obj.__func__, None)]
    if isinstance(obj, types.MethodType):
        return [(path, obj.__func__, None), (path, obj.__self__, None)]
    if isinstance(obj, types.BuiltinMethodType):  # a container's own method, such as store.append
        return [] if isinstance(obj.__self__, types.ModuleType) else [(path, obj.__self__, None)]
    if isinstance(obj, functools.partial):
        return [(path, obj.func, None), (path, obj.args, None), (path, obj.keywords or {}, None)]
    if isinstance(obj, types.FunctionType):
        return _function_children(obj, module)
    if isinstance(obj, types.CellType):
        try:
            return [(path, obj.cell_contents, None)]
        except ValueError:  # an empty cell
            return []
    if isinstance(obj, types.ModuleType) or (isinstance(obj, type) and _library(obj)):
        return []
    if isinstance(obj, type):
        place = where if where.startswith("the class attribute") else f"the class attribute `{obj.__name__}`"
        return [(f"{obj.__name__}.{name}", value, _attribute_place(place, name)) for name, value in
                list(type.__dict__["__dict__"].__get__(obj).items()) if name not in _SKIPPED]
    if not on_ctx and _library(type(obj)) and not isinstance(obj, types.SimpleNamespace):
        return []
    return [(f"{path}.{name}" if name.isidentifier() else f"{path}[{_key(name)}]", value, None)
            for name, value in _attributes(obj)]


def _attribute_place(place: str, name: str) -> str:
    """``the class attribute `Sqrt``` and ``kept`` give ``the class attribute `Sqrt.kept```."""
    return place[:-1] + f".{name}`" if name.isidentifier() else place


def _function_children(function, module: dict) -> list[tuple[str, object, str | None]]:
    """A function's closure cells, default arguments and attributes, if the student wrote it (in the Function's
    module)."""
    if function.__globals__ is not module:
        return []
    name = function.__name__ if function.__name__.isidentifier() else "a lambda"
    children = [(f"{name} (closure)", cell, f"a closure of {name}") for cell in function.__closure__ or ()]
    children += [(f"{name} (default)", value, f"a default argument of {name}") for value in function.__defaults__ or ()]
    children += [(f"{name} (default)", value, f"a default argument of {name}")
                 for value in (function.__kwdefaults__ or {}).values()]
    children += [(f"{name}.{key}", value, f"the function attribute `{name}.{key}`") for key, value in
                 list(dict.items(function.__dict__)) if isinstance(key, str) and key.isidentifier()]
    return children


def _attributes(obj) -> list[tuple[str, object]]:
    """An object's instance attributes and slots, read through the builtin descriptors only (a property the
    student wrote is not called)."""
    found = []
    for cls in type(obj).__mro__:
        names = vars(cls)
        getter = names.get("__dict__")
        if isinstance(getter, (types.GetSetDescriptorType, types.MemberDescriptorType)) and not found:
            try:
                instance = getter.__get__(obj, type(obj))
                if isinstance(instance, dict):
                    found += [(k, v) for k, v in list(dict.items(instance)) if isinstance(k, str)]
            except (AttributeError, TypeError):
                pass
        slots = names.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots if isinstance(slots, (tuple, list)) else ():
            member = names.get(slot)
            if isinstance(member, types.MemberDescriptorType):
                try:
                    found.append((slot, member.__get__(obj, type(obj))))
                except AttributeError:  # a slot never set
                    pass
    return found


def _key(key) -> str:
    """A dict key as it may be shown: a short number or string as Python writes it, else its type."""
    if isinstance(key, (int, float, bool)) or (isinstance(key, str) and len(key) <= 30 and key.isprintable()):
        return repr(key)
    return f"<a {type(key).__name__[:30]}>"


def _inside(array, spans: list) -> bool:
    try:
        pointer = array.__array_interface__["data"][0]
    except (AttributeError, KeyError, TypeError):
        return False
    return any(start <= pointer < end for start, end in spans)


def _held_by(target, depth: int = 3) -> str | None:
    """The module attribute through which the garbage collector finds ``target`` held, up to ``depth`` containers
    up from it (``torch.nn.functional._kept``), or None: then only running functions, the checker's own lists,
    unnamed objects or C++ (torch's own) hold it."""
    level: list = [target]
    modules = {id(vars(m)): name for name, m in list(sys.modules.items()) if isinstance(m, types.ModuleType)}
    for depth_left in range(depth, 0, -1):
        holders = [h for h in _get_referrers(*level) if not isinstance(h, types.FrameType) and h is not level][:20]
        for holder in holders:
            if id(holder) in modules:
                key = next((k for k, v in list(dict.items(holder)) if any(v is x for x in level)), "?")
                inside = " (in a container there)" if depth_left < depth else ""
                return f"the attribute `{key}` of the module `{modules[id(holder)]}`{inside}"
        level = holders
    return None
