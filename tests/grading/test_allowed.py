"""The answer scan's allow-list (autograder.grading.running.judging.allowed): written down once, as rules over
the pinned versions, and the file the grader reads is what those rules give on them."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from autograder.grading.running.judging import allowed

pytest.importorskip("triton")  # (the rules name triton.language: the pinned versions have it, on Linux)


@pytest.fixture(scope="module")
def derived() -> dict:
    """The allow-list the grader reads."""
    return json.loads(allowed.DATA.read_text())


def test_the_file_the_grader_reads_is_what_the_rules_give_on_the_pinned_versions(derived):
    # Derived in a process of its own: what a test process imported before must not change it.
    check = subprocess.run([sys.executable, "-m", "autograder.grading.running.judging.allowed", "--check"],
                           capture_output=True, text=True)
    assert (check.returncode, check.stdout) == (0, "allowed.json is up to date\n"), check.stdout + check.stderr
    counts = {key: len(value) for key, value in derived.items()}
    assert counts["attributes"] > 900 and counts["builtins"] > 100 and sum(map(len, derived["modules"].values())) > 2000


def test_what_the_assignments_teach_is_on_it_and_what_reaches_files_or_the_interpreter_is_not(derived):
    modules, attributes = derived["modules"], set(derived["attributes"])
    on = {"torch": ["where", "einsum", "sqrt", "zeros_like", "float64", "no_grad", "Tensor", "pi"],
          "torch.nn.functional": ["gelu", "softplus", "one_hot"], "torch.nn": ["Module", "Parameter", "Linear"],
          "torch.autograd": ["Function", "grad"], "torch.autograd.function": ["once_differentiable"],
          "torch.func": ["vmap", "jacrev"], "torch.amp": ["custom_fwd", "custom_bwd"],
          "torch.library": ["custom_op", "register_fake", "register_autograd", "triton_op", "wrap_triton"],
          "triton": ["jit", "cdiv", "autotune"], "triton.language": ["load", "store", "dot", "program_id", "math"],
          "math": ["sqrt"], "numpy": ["cumsum", "clip", "ndarray"]}
    for module, names in on.items():
        assert set(names) <= set(modules[module]), module
    off = {"torch": ["load", "save", "from_file", "compile", "utils", "functional", "jit", "hub", "ops", "classes",
                     "set_num_threads", "set_default_dtype", "fork"],
           "numpy": ["load", "save", "fromfile", "ctypeslib", "lib", "memmap"], "triton": ["compile", "runtime"],
           "triton.language": ["inline_asm_elementwise", "extra", "core"], "torch.library": ["Library", "get_kernel"]}
    for module, names in off.items():
        assert not set(names) & set(modules[module]), module
    assert {"new_zeros", "save_for_backward", "needs_input_grad", "saved_tensors", "element_ty", "sum_to_size",
            "register_buffer", "training", "items"} <= attributes
    assert not {"grad_fn", "register_hook", "untyped_storage", "ctypes", "tofile", "f_back", "format"} & attributes
    assert {"f_back", "f_globals", "gi_frame", "tb_frame", "co_code", "cr_frame", "cell_contents"} <= set(derived["never"])
    assert not {"eval", "exec", "compile", "open", "globals", "vars", "__import__", "breakpoint"} & set(derived["builtins"])
    assert {"aten", "prims", "load_library"} <= set(derived["op_namespaces"])


def test_no_allowed_name_or_value_type_holds_a_module_but_through_a_special_attribute(derived):
    """Why an attribute allowed on one value may be allowed on all: none of them leads to a module (whose names
    would escape the list) other than through a dunder such as ``__self__``, which is never allowed but these."""
    found = []
    owners = [allowed._import(path) for path in allowed.VALUE_TYPES]
    for module, names in derived["modules"].items():
        owners += [getattr(allowed._import(module), n) for n in names if f"{module}.{n}" not in derived["modules"]]
    for owner in owners:
        for name in dir(owner):
            if name.startswith("__") and name not in derived["dunders"]:
                continue
            try:
                value = getattr(owner, name)
            except Exception:  # noqa: BLE001 (an attribute that cannot be read leads nowhere)
                continue
            if isinstance(value, types.ModuleType):
                found.append(f"{getattr(owner, '__name__', owner)}.{name}")
    assert found == []
