"""The referee's judges: what each check a test cell calls decides, outside the student's process.

Each judge (``check_function``, ``check_saved``, ``check_with``, ``explain_known_mistakes``, ...) runs
in the referee when a test cell calls it: it computes what is right itself (the reference, on the
referee's own random inputs), and queues a request to the student's process ("apply F on these
tensors", "record what F saves") with what judges the reply (``Referee.judge_cell`` sends them).
The student's names are ``StudentObject``s here: a judge may name them, nothing else may use them.
"""

from __future__ import annotations

import types

from autograder.grading.running.judging.kernel_judges import KernelJudges
from autograder.grading.running.judging.replies import (as_found, autograd_problem, input_names, plain, raw_gradients,
                                                        unanswered)
from autograder.grading.running.messages.wire import Unsupported, decode, encode

JUDGES = ("check_function", "check_forward", "check_callable", "check_built_on", "check_saved", "check_values",
          "check_with", "explain_known_mistakes", "explain_non_finite", "check_backward_size", "check_keeps_dtype",
          "check_device", "check_kernel", "check_backward_kernel", "check_attention_forward", "check_attention_backward",
          "on_pieces", "requires")
TRANSFORMS = ("vmap", "forward_ad", "double_backward", "compile", "mutates")  # judged from both sides' results
ALLOWED = {"autograd_in_backward"}  # a permission: backward may call autograd (gradient checkpointing)


class StudentObject:
    """A name defined by the student's solution cells: the referee may pass it to a judge, nothing else."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)

    def __getattr__(self, attribute):
        raise Unsupported(f"{self.name}.{attribute} lives in the student's process")

    def __call__(self, *args, **kwargs):
        raise Unsupported(f"{self.name}() runs student code")

    def __repr__(self) -> str:
        return f"<the student's {self.name}>"


class _Unavailable:
    """A value the referee could not compute (its statement was skipped): any use skips the statement."""

    def __getattr__(self, attribute):
        raise Unsupported("a value the referee could not compute")

    def __call__(self, *args, **kwargs):
        raise Unsupported("a value the referee could not compute")

    def __bool__(self):
        raise Unsupported("a value the referee could not compute")

    def __iter__(self):
        raise Unsupported("a value the referee could not compute")

    def _unsupported(self, *args):
        raise Unsupported("a value the referee could not compute")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __len__ = __getitem__ = __contains__ = _unsupported
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _unsupported
    __abs__ = __neg__ = __float__ = __int__ = __index__ = __format__ = _unsupported
    __hash__ = object.__hash__


UNAVAILABLE = _Unavailable()


class Judges(KernelJudges):
    """The checks a test cell may call; they queue ``(request, compare)`` pairs on ``self.pending``, judged by the
    requirement stated for their object (``requires``) where there is one."""

    pending: list
    contracts: dict  # the student's name -> its exercise's Contract (autograder.student.checker.contracts)

    def requires(self, objects, requirement, autograd: bool = True, exact: bool = False) -> None:
        """What the test's ``requires`` states: the exercise's requirement, which every later check of ``objects``
        (the student's object, or a tuple of them) is judged by too (``_queue``)."""
        from autograder.student.checker.contracts import contracts_of

        named = list(objects) if isinstance(objects, (tuple, list)) else [objects]
        if not all(isinstance(o, StudentObject) for o in named):
            raise Unsupported("not a requirement of the student's objects")
        self.contracts.update(contracts_of([o.name for o in named], requirement, autograd, exact))

    def _queue(self, function, request: dict, compare, exact: tuple | None = None) -> None:
        """Queue ``(request, compare)``, judged by the requirement stated for ``function`` too, where there is one
        (``requirements.judged_by``; ``exact``: (reference, leaves, grad, upstream) of a check of gradients)."""
        contract = self.contracts.get(function.name) if isinstance(function, StudentObject) else None
        if contract is not None:
            from autograder.grading.running.judging.requirements import judged_by

            compare = judged_by(function.name, contract, request, compare, exact)
        self.pending.append((request, compare))

    @staticmethod
    def _is_student(function) -> bool:
        """Whether ``function`` is one of the student's names (only those may be checked)."""
        return isinstance(function, StudentObject)

    def check_function(self, function, reference, *args, rtol: float = 1e-6, atol: float = 1e-8,
                       inplace: bool = False, constants: tuple = (), **options) -> None:
        """What the test's ``check_function`` call decides from values: outputs and gradients."""
        self._judge(function, reference, args, rtol, atol, inplace, constants, options, backward=True)

    def check_forward(self, function, reference, *args, rtol: float = 1e-6, atol: float = 1e-8,
                      inplace: bool = False) -> None:
        """What the test's ``check_forward`` call decides: forward's outputs."""
        self._judge(function, reference, args, rtol, atol, inplace, (), {}, backward=False)

    def check_callable(self, function, reference, *args, rtol: float = 1e-6, atol: float = 1e-8,
                       uses: tuple = (), **options) -> None:
        """What the test's ``check_callable`` call decides: a function's (or a Module's) outputs and gradients,
        that its graph holds the Functions it must ``use``, and its results under the ``options``' transforms."""
        self._judge(function, reference, args, rtol, atol, False, (), options, backward=not options.get("mutates"),
                    kind="call", uses=uses)

    def check_built_on(self, function, reference, *args, on: dict, harness=None, rtol: float | None = None,
                       atol: float | None = None) -> None:
        """What the test's ``check_built_on`` decides (``autograder.student.checker.built_on``): the student's object
        (or the ``harness`` run with it) matches ``reference`` built on stand-ins of the pieces ``on`` names, and still
        does with the student's pieces replaced in the examinee by another function of the same inputs (its values
        and gradients, then its gradients alone) and the stand-ins replaced alike here."""
        import torch

        from autograder.student.checker.built_on import CHANGES, follows_problem, stand_in

        if not (isinstance(on, dict) and on and all(isinstance(n, str) and n.isidentifier() for n in on)):
            raise Unsupported("check_built_on needs on={the Function's name: its reference}")
        names, seed = list(on), int(torch.randint(0, 2**31 - 1, ()))
        contract = self.contracts.get(function.name) if isinstance(function, StudentObject) else None
        requirement = contract.requirement if contract is not None else None
        for change in (None, *((kind, seed) for kind in CHANGES)):
            built = reference(*[stand_in(n, piece, change).apply for n, piece in on.items()])
            if harness is not None:
                self.check_with(harness, function, built, *args, rtol=1e-9 if rtol is None else rtol,
                                atol=0.0 if atol is None else atol)
            else:
                self._judge(function, built, args, 1e-6 if rtol is None else rtol, 1e-8 if atol is None else atol,
                            False, (), {}, backward=True, kind="call", uses=tuple(names) if change is None else ())
            if change is not None:  # the examinee answers with the student's pieces changed as the stand-ins are
                request, compare = self.pending.pop()
                request["built_on"] = {"pieces": names, "kind": change[0], "seed": change[1]}
                self.pending.append((request, lambda reply, compare=compare, kind=change[0]: (
                    lambda found: found and follows_problem(function.name, names, found, kind, requirement))(
                        compare(reply))))

    def check_saved(self, function, reference, *args, saves=None, max_saved: int | None = None,
                    inplace: bool = False, rtol: float = 1e-6, atol: float = 1e-8) -> None:
        """What the test's ``check_saved`` call decides: the tensors the Function keeps for backward."""
        import torch

        from autograder.student.checker.contracts import broken
        from autograder.student.checker.saved import expected_saved, saved_problem, swap_plan, swap_problem

        if not isinstance(function, StudentObject):
            raise Unsupported("not a check of the student's Function")
        if (saves is None) == (max_saved is None):
            raise TypeError("check_saved needs saves=... or max_saved=..., not both")
        grad = [isinstance(a, torch.Tensor) and a.is_floating_point() for a in args]
        leaves = [a.detach().to(torch.float64).clone().requires_grad_(True) if wanted else a
                  for a, wanted in zip(args, grad)]
        expected, plan = [], None
        if saves is not None:
            with torch.enable_grad():
                outputs = reference(*[a.detach().clone().requires_grad_(True) if w else a for a, w in zip(leaves, grad)])
            expected = expected_saved(saves, leaves, tuple(outputs) if isinstance(outputs, (tuple, list)) else
                                      (outputs,), None)
            plan = swap_plan(saves, reference, leaves, None)
        largest = max((a.numel() for a in leaves if isinstance(a, torch.Tensor)), default=0)
        request = {"target": function.name, "kind": "saved", "args": [encode(a) for a in leaves], "grad": grad,
                   "inplace": bool(inplace), "upstream": None}
        if plan is not None:  # backward is given, in place of what forward saved, what a right one saves elsewhere
            request["swap"] = {"saved": [encode(t) for t in plan["swap_in"]],
                               "upstream": [None if u is None else encode(u) for u in plan["upstream"]]}

        def compare(reply) -> str | None:
            if unanswered(reply):
                return as_found(function.name, unanswered(reply))
            try:
                saved = [decode(t) for t in reply["saved"]]
                kept = [(plain(what), plain(where)) for what, where in reply["kept"][:5]]
                swap = reply["swap"]
                if swap is not None and swap.get("error") is not None:
                    swap = {"error": plain(swap["error"])}
                elif swap is not None:
                    swap = {key: [None if g is None else decode(g) for g in swap[key][:sum(grad)]]
                            for key in ("own", "swapped")}
                    if any(len(grads) != sum(grad) for grads in swap.values()):
                        raise ValueError("gradients")
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                return as_found(function.name, f"could not be checked: the grader's run of your answers sent a malformed "
                                             f"answer ({type(error).__name__})")
            if not all(isinstance(t, torch.Tensor) for t in saved):
                return as_found(function.name, "saved something that is not a tensor of a plain dtype")
            problem = (saved_problem(function.name, saved, kept, expected, max_saved, largest, rtol, atol)
                       or (plan and swap_problem(function.name, swap, plan, input_names(reply, sum(grad)), rtol, atol)))
            contract = self.contracts.get(function.name)
            return problem and as_found(function.name, broken(contract and contract.requirement, problem), named=True)

        self.pending.append((request, compare))

    def check_values(self, function, reference, *args, rtol: float = 1e-9, atol: float = 0.0) -> None:
        """What the test's ``check_values`` call decides: a plain function's result on plain data."""
        self._judge_data(None, function, reference, args, rtol, atol)

    def check_with(self, harness, function, reference, *args, rtol: float = 1e-9, atol: float = 0.0) -> None:
        """What the test's ``check_with`` call decides: the notebook's ``harness`` run with the student's object."""
        if not isinstance(harness, types.FunctionType) or harness.__name__ == "<lambda>":
            raise Unsupported("check_with needs a harness the notebook's visible cells define by name")
        self._judge_data(harness, function, reference, args, rtol, atol)

    def _judge_data(self, harness, function, reference, args, rtol, atol, explain=None) -> None:
        from autograder.student.checker.harness import _copies, as_data, same_data, short, with_message

        if not isinstance(function, StudentObject):
            raise Unsupported("not a check of the student's object")
        want = as_data(reference(*_copies(args)) if harness is None else harness(reference, *_copies(args)))
        request = {"target": function.name, "kind": "values" if harness is None else "with",
                   "harness": None if harness is None else harness.__name__, "args": [encode(a) for a in args],
                   "grad": [False] * len(args), "inplace": False, "upstream": None}

        def compare(reply) -> str | None:
            if explain is not None and isinstance(reply, dict) and reply.get("error") is not None:
                return as_found(function.name, explain(None, want, str(reply["error"])), named=True)
            if unanswered(reply):
                return as_found(function.name, unanswered(reply))
            try:
                got = decode(reply["result"])
            except (KeyError, TypeError, ValueError) as error:
                return as_found(function.name, f"could not be checked: a malformed answer ({error})")
            if same_data(got, want, rtol, atol):
                return None
            if explain is not None:  # check_kernel: what the wrong results say about the kernel
                return as_found(function.name, explain(got, want) or f"{function.name} gives {short(got)}", named=True)
            if harness is not None:
                return as_found(function.name, with_message(harness.__name__, function.name, got, want, rtol, atol),
                              named=True)
            return as_found(function.name, f"{function.name}{tuple(short(a) for a in args)} gives {short(got)}, "
                                         f"expected {short(want)}", named=True)

        self._queue(function, request, compare)

    def explain_known_mistakes(self, function, args, mistakes, seed=0) -> None:
        """What the test's ``explain_known_mistakes`` finds: which known wrong derivation backward returns, if any."""
        from autograder.student.checker.diagnoses import mistake_found

        self._diagnose(function, "backward", args, seed, lambda record: mistake_found(function.name, record, args,
                                                                                        mistakes))

    def explain_non_finite(self, function, args, situation, forward_advice, backward_advice) -> None:
        """What the test's ``explain_non_finite`` finds: inf or NaN from forward or backward."""
        from autograder.student.checker.diagnoses import non_finite_problem

        self._diagnose(function, "finite", args, 0, lambda record: non_finite_problem(
            function.name, record, situation, forward_advice, backward_advice))

    def check_backward_size(self, function, *args, below: int) -> None:
        """What the test's ``check_backward_size`` decides: backward builds no tensor of ``below`` elements."""
        from autograder.student.checker.diagnoses import backward_size_problem

        self._diagnose(function, "size", args, 0, lambda record: backward_size_problem(
            function.name, int(record["largest"]), below))

    def check_keeps_dtype(self, function, *args) -> None:
        """What the test's ``check_keeps_dtype`` decides: float32 inputs give float32 outputs and gradients."""
        from autograder.student.checker.diagnoses import dtype_problem

        self._diagnose(function, "dtype", args, 0, lambda record: dtype_problem(function.name, record, args))

    def check_device(self, function, *args, device: str = "meta") -> None:
        """What the test's ``check_device`` decides: forward and backward keep every tensor on the inputs' (meta) device."""
        from autograder.student.checker.devices import device_problem

        if device != "meta":
            raise Unsupported("a device check on a real device runs where that device is")
        self._diagnose(function, "device", args, 0, lambda record: device_problem(function.name, record))

    def _diagnose(self, function, what: str, args, seed: int, judge) -> None:
        """Ask the student's process for a diagnosis record (``autograder.student.checker.diagnoses``); judge it here."""
        if not isinstance(function, StudentObject):
            raise Unsupported("not a diagnosis of the student's Function")
        request = {"target": function.name, "kind": "diagnosis", "what": what, "seed": int(seed),
                   "args": [encode(a) for a in args], "grad": [False] * len(args), "inplace": False, "upstream": None}

        def compare(reply) -> str | None:
            if unanswered(reply):
                return as_found(function.name, unanswered(reply))
            try:
                problem = judge(decode(reply["record"]))
            except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as error:
                return as_found(function.name, f"could not be checked: a malformed answer ({type(error).__name__})")
            return problem and as_found(function.name, problem, named=True)

        self.pending.append((request, compare))

    def _judge(self, function, reference, args, rtol, atol, inplace, constants, options, backward,
               kind: str = "apply", uses: tuple = ()) -> None:
        import torch

        from autograder.student.checker.transforms import difference, draw_payload, expected_results, fresh, used_outputs

        if not isinstance(function, StudentObject) or set(options) - set(TRANSFORMS) - ALLOWED:
            raise Unsupported("not a check of the student's Function")
        if any(not isinstance(c, int) for c in constants):
            raise Unsupported("constants named, not numbered")
        grad = [isinstance(a, torch.Tensor) and a.is_floating_point() and i not in constants
                and not options.get("mutates") for i, a in enumerate(args)]
        leaves = [a.detach().to(torch.float64).clone().requires_grad_(wanted) if isinstance(a, torch.Tensor)
                  and a.is_floating_point() else a.clone() if isinstance(a, torch.Tensor) else a
                  for a, wanted in zip(args, grad)]
        request = {"target": function.name, "kind": kind, "args": [encode(a) for a in leaves], "grad": grad,
                   "inplace": bool(inplace), "upstream": None}
        # check_function's default: backward derives the gradient, it does not hand the work back to autograd.
        forbid = backward and kind == "apply" and not options.get("autograd_in_backward")
        if forbid:
            request["forbid_autograd"] = True
        with torch.enable_grad():
            expected = reference(*[a.clone() if w and inplace else a for a, w in zip(leaves, grad)])
        expected = tuple(expected) if isinstance(expected, (tuple, list)) else (expected,)
        upstream = []
        if backward:
            upstream = [torch.randn_like(e) if isinstance(e, torch.Tensor) and e.requires_grad else None
                        for e in expected]
            request["upstream"] = [None if u is None else encode(u) for u in upstream]
        who = ("forward", "forward's output") if kind == "apply" else (function.name, "its output")
        transforms = []  # (kind, the reference's results) for each transform asked for
        for name in [t for t in TRANSFORMS if options.get(t)]:
            used = used_outputs(expected)
            payload = draw_payload(name, leaves, expected)
            transforms.append((name, expected_results(name, reference, fresh(leaves), payload, used)))
            request.setdefault("transforms", []).append({
                "kind": name, "used": used, "payload": {k: [encode(v) for v in vs] for k, vs in payload.items()}})

        def compare(reply) -> str | None:
            problem = self._compare(leaves, grad, expected, upstream, reply, rtol, atol, who, kind == "apply")
            if problem is None and forbid:
                problem = autograd_problem(reply)
            if problem is None and inplace and (reply.get("returned_inputs") or [None])[0] is None:
                problem = ("should return its input tensor itself, modified in place (and marked with "
                           "ctx.mark_dirty), not a new tensor")
            for (name, want), got in zip(transforms, (reply.get("transforms") or [None] * len(transforms))
                                         if problem is None else []):
                if problem is not None:
                    break
                if not isinstance(got, dict) or (got.get("error") is None and not isinstance(got.get("results"), list)):
                    problem = f"could not be checked {name}: the grader's run of your answers sent no answer"
                elif got.get("error") is not None:
                    from autograder.student.checker.messages import student_error

                    problem = f"under {name}, it {student_error(str(got['error'])[:300])}"
                else:
                    try:
                        problem = difference(name, [decode(r) if isinstance(r, dict) and "other" not in r else r
                                                    for r in got["results"]], want, rtol, atol)
                    except (KeyError, TypeError, ValueError) as error:
                        problem = f"could not be checked {name}: a malformed answer ({error})"
            if problem is None and len(reply.get("transforms") or []) != len(transforms):  # (problem None: a dict)
                problem = "could not be checked: the grader's run of your answers sent the wrong number of results"
            if problem is None and uses:
                from autograder.student.checker.callables import missing_functions, missing_message

                names = [str(n) for n in reply.get("graph") or []][:200]
                if missing_functions(uses, names):
                    return as_found(function.name, missing_message(function.name, missing_functions(uses, names),
                                                                 names), named=True)
            return problem and as_found(function.name, problem)

        self._queue(function, request, compare, exact=(reference, leaves, grad, upstream) if backward else None)

    @staticmethod
    def _compare(leaves, grad, expected, upstream, reply, rtol, atol, who, function: bool = False) -> str | None:
        """What is wrong with the student's reply, or None when outputs (and gradients) match. ``who``: (whose
        outputs they are, what to call one: forward's, or the function's); inputs are named as the reply names them.
        Backward must leave what it was given as it was (grad_output; for a ``function``, a Function's, its inputs,
        outputs and saved tensors too, and its gradients must be right again on a second call: checker.overwrites),
        and return no gradient for an integer tensor; a gradient of another dtype that is wrong says so."""
        import torch

        from autograder.student.checker.messages import _output_label, wrong_gradient, wrong_output
        from autograder.student.checker.overwrites import overwrite_problem, read_overwritten, second_problem
        from autograder.student.checker.patterns import _is_integer_tensor, cast_words, integer_gradient
        from autograder.student.checker.references import _close

        if unanswered(reply):
            return unanswered(reply)
        try:
            outputs = [decode(o) if isinstance(o, dict) and "other" not in o else o for o in reply["outputs"]]
        except (KeyError, TypeError, ValueError) as error:
            return f"could not be checked: the grader's run of your answers sent a malformed answer ({error})"
        if len(outputs) != len(expected):
            return f"{who[0]} returned {len(outputs)} outputs, the reference {len(expected)}"
        for k, (got, want) in enumerate(zip(outputs, expected)):
            label = _output_label(k, len(expected), who[1])
            if not isinstance(want, torch.Tensor):
                from autograder.student.checker.harness import same_data, short

                if not same_data(got, want, max(rtol, 1e-12), atol):
                    return f"{label} is {short(got)}, expected {short(want)}"
                continue
            if not isinstance(got, torch.Tensor):
                return f"{label} is not a tensor"
            if got.shape != want.shape or got.dtype != want.dtype:
                return (f"{label} has shape {list(got.shape)} and dtype {got.dtype}, expected "
                        f"{list(want.shape)} and {want.dtype}")
            if not want.is_floating_point() and not torch.equal(got, want):
                return f"{label} is wrong (integer values must match exactly)"
            if want.is_floating_point() and not _close(got, want, rtol, atol):
                return wrong_output(label, who[0], want, got, rtol, atol)
        if not any(u is not None for u in upstream):
            return None
        used = [(e, u) for e, u in zip(expected, upstream) if u is not None]
        wrt = [leaf for leaf, wanted in zip(leaves, grad) if wanted]
        right = torch.autograd.grad([e for e, _ in used], wrt, [u for _, u in used], allow_unused=True)
        right = [torch.zeros_like(leaf) if want is None else want for leaf, want in zip(wrt, right)]
        names = input_names(reply, len(leaves))
        found = read_overwritten(reply.get("overwritten"), len(leaves), len(expected))
        if found is None:
            return "could not be checked: the grader's run of your answers sent no record of what backward changed"
        if found:
            return overwrite_problem(found, names, len(expected))
        try:
            grads = [decode(g) for g in reply["grads"]]
            raw, second = (raw_gradients(reply.get("raw"), len(leaves)),
                           {"raw": raw_gradients(reply["second"].get("raw"), len(leaves))}) if function else (None, {})
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            return f"could not be checked: the grader's run of your answers sent malformed gradients ({error})"
        if len(grads) != len(leaves):
            return "could not be checked: the grader's run of your answers sent the wrong number of gradients"
        for i, (leaf, returned) in enumerate(zip(leaves, raw or [])):
            if _is_integer_tensor(leaf) and returned is not None:
                return integer_gradient(names[i], leaf.dtype)
        positions = [j for j, w in enumerate(grad) if w]
        for i, (got, want) in zip(positions, zip([g for g, w in zip(grads, grad) if w], right)):
            name = names[i]
            got = torch.zeros_like(want) if got is None else got
            if not isinstance(got, torch.Tensor) or got.shape != want.shape:
                return f"the gradient for `{name}` is wrong: it is not a tensor of `{name}`'s shape {list(want.shape)}"
            if not _close(got, want, rtol, atol):
                returned = raw[i] if raw else None
                return wrong_gradient(name, want, got, rtol, atol, cast_words(name, returned.dtype, want.dtype)
                                      if isinstance(returned, torch.Tensor) and returned.is_floating_point() else "")
        return second_problem(second, right, positions, names, rtol, atol) if function else None
