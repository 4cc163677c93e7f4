"""What an answer cell may use: the allow-list of the answer scan (``scan``), written down once, here.

The scan runs before the examinee runs an answer, on its source alone; whatever the answer names must be
on this list, else the answer cell is not run (every check of what it defines fails, naming what it used
and its line). The list is made of rules over the pinned versions of torch, numpy and triton (``derive``);
what the rules give is written to ``allowed.json`` next to this file, which the scan reads (the grader's
process never imports torch), and ``tests/grading/test_allowed.py`` checks that the file is what the rules
give on the pinned versions (``--check``). After changing a rule or a pin:
``python -m autograder.grading.running.judging.allowed``.

An answer may use:

- ``MODULES``: these modules (imported, or named through a name the given cells bound) and, of each, the
  names its rule gives: ``PUBLIC`` (every public name of the module that is not a module itself and was
  made by the module's own library, less ``REFUSED``), or the names listed. A module reached through
  another (``torch.functional``, ``torch.utils``, ``numpy.lib``) is refused unless it is listed here.
  torch's own names (``TORCH``): its operations, its functions, dtypes, layouts and constants, and the
  classes in ``TORCH_CLASSES``, less ``REFUSED["torch"]`` (files, compiling, threads, process-wide settings).
- ``BUILTINS``: plain Python's builtins that reach neither the interpreter nor files.
- On any value (a tensor, ``ctx``, ``self``, an array, a list, a string...): the public attributes of the
  types in ``VALUE_TYPES`` and of torch.nn's modules (with the attributes nn's modules declare), less
  ``VALUE_REFUSED`` (hooks, graph nodes, storages, files); and the attributes the answers and the given
  cells define themselves. Never an attribute of the interpreter's frames, code, tracebacks or
  generators (``never``), whoever defines it.
- ``DUNDERS``: the only special attributes; the only special methods an answer may define are in ``scan``.

A source scan cannot know the type of a value: an attribute allowed on one kind of value is allowed on
all, so the list keeps out every name that reaches the interpreter on any value.
"""

from __future__ import annotations

import builtins
import importlib
import json
import sys
import types
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("allowed.json")
PUBLIC, TORCH, NN = "public", "torch", "nn"  # the rules below that are not a list of names

MODULES: dict[str, str | set[str]] = {
    "torch": TORCH,
    "torch.nn": NN,  # its modules, Parameter and Buffer, and the submodules below
    "torch.nn.functional": PUBLIC,
    "torch.nn.init": PUBLIC,
    "torch.nn.grad": PUBLIC,  # conv*d_input / conv*d_weight: a convolution's backward
    "torch.autograd": {"Function", "grad", "backward", "gradcheck", "gradgradcheck", "Variable", "enable_grad",
                       "no_grad", "set_grad_enabled", "inference_mode", "detect_anomaly"},
    "torch.autograd.function": {"Function", "FunctionCtx", "once_differentiable", "InplaceFunction"},
    "torch.autograd.forward_ad": {"dual_level", "make_dual", "unpack_dual"},
    "torch.autograd.functional": {"jacobian", "hessian", "vjp", "jvp", "hvp", "vhp"},
    "torch.func": PUBLIC,  # 08
    "torch.library": {"custom_op", "triton_op", "wrap_triton", "register_fake", "register_autograd",  # 09, 10
                      "register_kernel", "register_vmap", "register_autocast", "define", "impl", "impl_abstract",
                      "opcheck", "get_ctx"},
    "torch.amp": {"custom_fwd", "custom_bwd", "autocast", "GradScaler", "is_autocast_available"},  # 09
    "torch.cuda": {"is_available", "synchronize", "Event", "current_device", "device_count", "get_device_name",
                   "get_device_properties", "get_device_capability", "memory_allocated", "max_memory_allocated",
                   "reset_peak_memory_stats", "empty_cache", "manual_seed", "is_bf16_supported",
                   "Stream", "current_stream", "stream", "CUDAGraph", "graph", "make_graphed_callables"},  # 07
    "torch.cuda.amp": {"custom_fwd", "custom_bwd", "autocast"},
    "torch.mps": {"synchronize", "manual_seed"},
    "torch.backends": set(),  # (only the submodules below)
    "torch.backends.mps": {"is_available", "is_built"},
    "torch.backends.cudnn": {"is_available"},
    "torch.optim": PUBLIC,  # a training loop in an answer (03's LinearLayer is trained with SGD)
    "torch.linalg": PUBLIC,
    "torch.fft": PUBLIC,
    "torch.special": PUBLIC,
    "torch.testing": {"assert_close", "make_tensor"},
    "math": PUBLIC,
    "numbers": PUBLIC,  # isinstance(c, numbers.Real)
    "numpy": PUBLIC,
    "numpy.linalg": PUBLIC,
    "numpy.fft": PUBLIC,
    "numpy.random": PUBLIC,
    "numpy.testing": {"assert_allclose", "assert_array_equal", "assert_array_almost_equal", "assert_equal",
                      "assert_almost_equal"},
    "numpy.typing": {"NDArray", "ArrayLike", "DTypeLike"},
    "triton": {"jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2", "language"},  # 10
    "triton.language": PUBLIC,
    "triton.language.math": PUBLIC,
    "typing": {"Any", "Optional", "Union", "List", "Tuple", "Dict", "Set", "FrozenSet", "Sequence", "Mapping",
               "MutableMapping", "Iterable", "Iterator", "Generator", "Callable", "Collection", "Hashable", "Sized",
               "NamedTuple", "TypeVar", "Generic", "Protocol", "Literal", "Final", "ClassVar", "Annotated",
               "TypeAlias", "Self", "Never", "NoReturn", "Type", "cast", "overload", "final", "TYPE_CHECKING",
               "SupportsFloat", "SupportsInt", "SupportsIndex"},
    "collections": {"namedtuple", "OrderedDict", "defaultdict", "Counter", "deque", "ChainMap"},
    "collections.abc": PUBLIC,
    "dataclasses": {"dataclass", "field", "fields", "asdict", "astuple", "replace", "is_dataclass", "InitVar",
                    "KW_ONLY", "FrozenInstanceError"},
    "functools": {"reduce", "partial", "partialmethod", "lru_cache", "cache", "cached_property", "wraps",
                  "total_ordering", "cmp_to_key"},
    "itertools": PUBLIC,
    "operator": {"abs", "add", "and_", "concat", "contains", "eq", "floordiv", "ge", "getitem", "gt", "index",
                 "inv", "invert", "is_", "is_not", "itemgetter", "le", "lshift", "lt", "matmul", "mod", "mul", "ne",
                 "neg", "not_", "or_", "pos", "pow", "rshift", "sub", "truediv", "truth", "xor"},
    "statistics": PUBLIC,
    "random": PUBLIC,
    "time": {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time",
             "process_time_ns", "sleep"},
    "copy": {"copy", "deepcopy"},
    "warnings": {"warn", "catch_warnings", "simplefilter", "filterwarnings"},
    "sys": {"stdout", "stderr", "float_info", "maxsize"},  # print(..., file=sys.stderr)
    "autograder": {"check_function", "check_device", "check_saved", "check_callable", "check_kernel",
                   "check_forward", "check_values"},  # the course's checkers, as students call them
}

# Of a PUBLIC (or TORCH) module, the names that stay out: they read or write files, compile or run strings,
# start threads or processes, change the whole process, or reach the interpreter.
REFUSED: dict[str, set[str]] = {
    "torch": {"load", "save", "from_file", "from_dlpack", "to_dlpack", "compile", "cond", "while_loop", "fork",
              "wait", "import_ir_module", "import_ir_module_from_buffer", "parse_ir", "parse_schema",
              "parse_type_comment", "merge_type_from_type_comment", "unify_type_list", "get_file_path",
              "prepare_multiprocessing_environment", "init_num_threads", "use_deterministic_algorithms",
              "autocast_increment_nesting", "autocast_decrement_nesting", "clear_autocast_cache", "classproperty",
              "get_device_module", "thread_safe_generator", "DisableTorchFunction", "DisableTorchFunctionSubclass"},
    "torch.nn.functional": {"handle_torch_function", "has_torch_function", "has_torch_function_unary",
                            "has_torch_function_variadic", "boolean_dispatch"},
    "numpy": {"load", "save", "savez", "savez_compressed", "loadtxt", "savetxt", "genfromtxt", "fromfile", "fromregex",
              "memmap", "DataSource", "info", "show_config", "show_runtime", "get_include", "test", "add_newdoc",
              "recarray", "record", "set_printoptions", "setbufsize", "seterrcall", "format_float_positional",
              "format_float_scientific", "array2string", "array_repr", "array_str"},
    "triton.language": {"inline_asm_elementwise", "str_to_ty", "map_elementwise"},
}
SETTINGS_ALLOWED = {"set_grad_enabled"}  # torch.set_*: process-wide settings, refused but this one

# torch's classes an answer may name (besides its exceptions and legacy tensor types, FloatTensor...).
TORCH_CLASSES = {"Tensor", "Size", "device", "dtype", "finfo", "iinfo", "Generator", "no_grad", "enable_grad",
                 "set_grad_enabled", "inference_mode", "autocast", "SymInt", "SymFloat", "SymBool", "layout",
                 "memory_format"}

BUILTINS = {
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "classmethod", "complex",
    "dict", "dir", "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "id", "input",
    "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next", "object", "oct", "ord",
    "pow", "print", "property", "range", "repr", "reversed", "round", "set", "slice", "sorted", "staticmethod", "str",
    "sum", "super", "tuple", "type", "zip", "aiter", "anext", "NotImplemented", "Ellipsis", "None", "True", "False",
    "memoryview",
    # (type: only as type(x).__name__ or in a comparison; getattr, hasattr, setattr, delattr: only with a name
    # written out that is allowed; see scan)
    "getattr", "hasattr", "setattr", "delattr",
}  # and every exception and warning class

# Values whose public attributes an answer may use on any value (with every class of torch.nn).
VALUE_TYPES = [
    "torch.Tensor", "torch.nn.Parameter", "torch.autograd.Function", "torch.autograd.function.FunctionCtx",
    "torch.autograd.function.BackwardCFunction", "torch.Size", "torch.dtype", "torch.device", "torch.finfo",
    "torch.iinfo", "torch.Generator", "torch.cuda.Event", "torch.cuda.Stream", "torch.cuda.CUDAGraph", "torch._library.custom_ops.CustomOpDef", "torch.optim.Optimizer",
    "numpy.ndarray", "numpy.generic", "numpy.dtype", "numpy.finfo", "numpy.iinfo", "numpy.random.Generator",
    "triton.language.tensor", "triton.language.constexpr", "triton.language.dtype", "triton.language.pointer_type",
    "builtins.list", "builtins.tuple", "builtins.dict", "builtins.set", "builtins.frozenset", "builtins.str",
    "builtins.bytes", "builtins.int", "builtins.float", "builtins.complex", "builtins.range", "builtins.slice",
    "builtins.property", "builtins.BaseException", "collections.Counter", "collections.deque",
    "collections.OrderedDict", "collections.defaultdict", "functools._lru_cache_wrapper", "sys.float_info",
]
# Set on instances: Module's, a Triton pointer's, vmap's info, an optimizer's.
VALUE_EXTRA = {"training", "element_ty", "batch_size", "randomness", "param_groups", "state", "defaults",
               # torch.cuda's graph API on the value an answer is given in its place (07's cuda=bench.TOY_CUDA)
               "Stream", "current_stream", "stream", "CUDAGraph", "graph", "synchronize"}
VALUE_REFUSED = {
    # the autograd graph's nodes and hooks: what the checks measure
    "grad_fn", "next_functions", "metadata", "register_prehook", "apply_jvp", "apply_boxed", "boxed_grads_call",
    "maybe_clear_saved_tensors", "clear_saved_tensors_on_access", "register_torch_dispatch", "register_effect",
    # memory, files and compiling
    "storage", "untyped_storage", "storage_type", "share_memory", "share_memory_", "record_stream", "ctypes",
    "dump", "dumps", "tofile", "compile", "with_traceback", "ipc_handle", "from_ipc_handle",
    # threads
    "parallel_apply", "replicate",
    # modules found by a name written as a string
    "get_submodule", "set_submodule", "get_parameter", "get_buffer",
    # format strings: only on a string written out, without attributes or indexes in its fields (see scan)
    "format", "format_map",
}  # and every name with "hook" in it

# The only special attributes (``__class__`` only as ``x.__class__.__name__`` or in a comparison, see scan).
# What registers torch's other operator namespaces (inductor, onnx, fsdp, streams...): what the grader's warm
# process imports (running/warm.py).
OPERATOR_MODULES = ("torch._dynamo", "torch._functorch.aot_autograd", "torch._inductor.pattern_matcher",
                    "torch.export._trace")
DUNDERS = {"__init__", "__name__", "__qualname__", "__doc__", "__class__"}
PRIVATE = {"_fields", "_replace", "_asdict", "_make"}  # a named tuple's own API


def _public(name: str) -> bool:
    return not name.startswith("_")


def _import(path: str):
    """The object at a dotted ``path`` (a module, or an attribute of one)."""
    module, _, rest = path.partition(".")
    obj = importlib.import_module(module)
    for part in rest.split(".") if rest else []:
        try:
            obj = importlib.import_module(f"{obj.__name__}.{part}") if isinstance(obj, types.ModuleType) \
                and not hasattr(obj, part) else getattr(obj, part)
        except ImportError:
            obj = getattr(obj, part)
    return obj


def _own(obj, library: str) -> bool:
    """Whether ``obj`` (not a module) is the library's own (not ``typing.Optional`` that torch imports)."""
    if isinstance(obj, types.ModuleType):
        return False
    if isinstance(obj, (bool, int, float, complex, type(None))):
        return True
    made = getattr(obj, "__module__", None) if callable(obj) else type(obj).__module__
    return made is None or made.split(".")[0] == library


def _torch_names(torch) -> set[str]:
    ops = set(dir(torch._C._VariableFunctions))
    chosen = set()
    for name in filter(_public, dir(torch)):
        obj = getattr(torch, name)
        if isinstance(obj, types.ModuleType):
            continue
        constant = isinstance(obj, (torch.dtype, torch.layout, torch.memory_format, float, type(None)))
        function = isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)) and (
            name in ops or obj.__module__ in ("torch", "torch.functional", "torch.random", "torch.func"))
        legacy = isinstance(obj, type) and name.endswith("Tensor") and obj.__module__ == "torch"
        error = isinstance(obj, type) and issubclass(obj, Exception)
        settings = name.startswith("set_") and name not in SETTINGS_ALLOWED
        if (constant or function or legacy or error or name in TORCH_CLASSES) and not settings:
            chosen.add(name)
    return chosen


def _module_names(path: str, rule) -> set[str]:
    module = _import(path)
    if rule == TORCH:
        chosen = _torch_names(module)
    elif rule == NN:
        chosen = {n for n in filter(_public, dir(module)) if isinstance(getattr(module, n), type)
                  and issubclass(getattr(module, n), (module.Module, module.Parameter, module.Buffer))}
    elif rule == PUBLIC:
        chosen = {n for n in filter(_public, dir(module)) if _own(getattr(module, n), path.split(".")[0])}
    else:
        missing = {n for n in rule if not hasattr(module, n)}
        assert not missing, f"{path} has no {sorted(missing)} in this version: correct allowed.MODULES"
        chosen = set(rule)
    submodules = {child.rpartition(".")[2] for child in MODULES if child.rpartition(".")[0] == path}
    return (chosen - REFUSED.get(path, set())) | submodules


def _value_attributes() -> set[str]:
    import torch

    classes = [_import(path) for path in VALUE_TYPES]
    for module in (torch.nn, torch.return_types):  # every module of nn; what topk, svd... return
        classes += [getattr(module, n) for n in filter(_public, dir(module)) if isinstance(getattr(module, n), type)]
    names = set(VALUE_EXTRA)
    for cls in classes:
        names |= set(filter(_public, dir(cls)))
        for base in getattr(cls, "__mro__", ()):
            names |= set(filter(_public, list(getattr(base, "__annotations__", {})) + list(getattr(base, "__constants__", []))))
    return {n for n in names - VALUE_REFUSED if "hook" not in n}


def _interpreter_internals(allowed: set[str]) -> set[str]:
    """Attributes of frames, code, tracebacks, generators, coroutines and closure cells (``f_back``,
    ``gi_frame``...), less those that are also an allowed value's (``clear``, ``replace``, ``close``)."""
    kinds = (types.FrameType, types.CodeType, types.TracebackType, types.GeneratorType, types.CoroutineType,
             types.AsyncGeneratorType, types.CellType)
    return {n for kind in kinds for n in dir(kind) if _public(n)} - allowed


def _op_namespaces(torch) -> set[str]:
    """The namespaces of torch's own operators: an answer may not define or register operators in them (those
    of the parts of torch that the grader's processes import register theirs on import)."""
    for module in OPERATOR_MODULES:
        importlib.import_module(module)
    names = {n.split("::")[0] for n in torch._C._dispatch_get_all_op_names()}
    return names | {n for n in dir(torch.ops) + dir(type(torch.ops)) if not n.startswith("__")}  # (load_library...)


def _torch_private(torch, numpy) -> set[str]:
    """Private names of the values torch and numpy make: an answer may not make them its own and so reach
    torch's (``Cube._backward_cls = ...``, ``x._version``). (A module's private names are never on the list.)"""
    from torch.autograd.function import BackwardCFunction, FunctionCtx

    owners = (torch.Tensor, torch.nn.Module, torch.autograd.Function, FunctionCtx, BackwardCFunction,
              torch.nn.Parameter, numpy.ndarray, numpy.generic)
    return {name for owner in owners for name in dir(owner) if name.startswith("_") and not name.startswith("__")}


def derive() -> dict:
    """The allow-list the rules above give on the versions installed here."""
    import numpy
    import torch

    names = {path: sorted(_module_names(path, rule)) for path, rule in MODULES.items()}
    attributes = _value_attributes()
    exceptions = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
                  and issubclass(getattr(builtins, n), BaseException)}
    return {
        "modules": names,
        "builtins": sorted((BUILTINS & set(dir(builtins))) | exceptions),
        "attributes": sorted(attributes),
        "never": sorted(_interpreter_internals(attributes)),
        "dunders": sorted(DUNDERS),
        "private": sorted(PRIVATE),
        "torch_private": sorted(_torch_private(torch, numpy)),
        "op_namespaces": sorted(_op_namespaces(torch)),
    }


@lru_cache(maxsize=1)
def load() -> dict:
    """The allow-list as ``derive`` wrote it (the grader's process reads it and imports nothing heavy)."""
    data = json.loads(DATA.read_text())
    return {key: ({k: frozenset(v) for k, v in value.items()} if isinstance(value, dict) else frozenset(value))
            for key, value in data.items()}


def _text(data: dict) -> str:
    return json.dumps(data, indent=0, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    """Write ``allowed.json`` from the rules (in a fresh process: what is derived must not depend on what
    else was imported); with ``--check``, say whether the file is what they give, and return 1 if not."""
    text = _text(derive())
    if argv[1:] != ["--check"]:
        DATA.write_text(text)
        return 0
    written = json.loads(DATA.read_text())
    differing = sorted(key for key, value in json.loads(text).items() if written.get(key) != value)
    print(f"allowed.json differs from the rules in: {', '.join(differing)}" if differing else "allowed.json is up to date")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
