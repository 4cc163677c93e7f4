"""The referee's judges of assignments 10's and 11's kernels (a part of ``judges.Judges``): ``check_kernel``,
``check_backward_kernel``, ``check_attention_forward``, ``check_attention_backward`` ask the examinee for a launcher's
runs (``checker.kernels.kernel_runs``: its results, its trace, its launches watched) and judge them here;
``with on_pieces(...)`` makes the checks inside the block run on the course's own pieces in place of the student's
launchers (``checker.pieces``).
"""

from __future__ import annotations

from autograder.grading.running.judging.replies import as_found, run_outcome, unanswered
from autograder.grading.running.messages.wire import Unsupported, decode, encode


class _OnPieces:
    """The referee's ``with on_pieces(...)`` block: each check queued inside it asks the examinee to answer with the
    course's pieces in place of the student's launchers (``"pieces"``), and where backward ran (check_function,
    check_callable), that the student's object called every piece."""

    def __init__(self, judges, names: tuple) -> None:
        self.judges, self.names, self.start = judges, names, 0

    def __enter__(self):
        self.start = len(self.judges.pending)
        return self

    def __exit__(self, *exc) -> None:
        pending = self.judges.pending
        pending[self.start:] = [({**request, "pieces": list(self.names)}, _calls_pieces(request, compare, self.names))
                                for request, compare in pending[self.start:]]


def _calls_pieces(request: dict, compare, names: tuple):
    """``compare``, and where backward ran, that the student's object called each of ``names``."""
    if request.get("upstream") is None:
        return compare
    target = str(request.get("target"))

    def judged(reply):
        problem = compare(reply)
        if problem is None and isinstance(reply, dict) and reply.get("error") is None:
            called = {str(n) for n in reply.get("pieces_called") or []}
            unused = [n for n in names if n not in called]
            if unused:
                problem = as_found(target, f"This exercise requires that {target} use {' and '.join(names)} (the check "
                                           f"runs the course's own in place of yours, which their own exercises judge), "
                                           f"but {target} never calls {' or '.join(unused)}", named=True)
        return problem

    return judged


class KernelJudges:
    """The kernel checks a test cell may call; they queue ``(request, compare)`` pairs on ``self.pending``."""

    pending: list
    _is_student: staticmethod  # (judges.Judges: whether an object is one of the student's names)

    def check_kernel(self, function, reference, *args, rtol: float = 1e-5, atol: float = 1e-5,
                     strided: bool = True, outputs: tuple = (), requires: str | None = None, finishing: tuple = (),
                     mistakes=None) -> None:
        """What the test's ``check_kernel`` call decides (assignments 10 and 11): a kernel launcher's results on the
        arguments (traced: ``checker.launches``), on non-contiguous copies and on their first row
        (``checker.kernels.kernel_runs``, made in the student's process), judged here: the exercise's contract
        (``requires``), then the values, explained in a kernel's terms (a forgotten tail, a wrong row stride, ...)."""
        from autograder.student.checker.kernels import kernel_verdict

        self._kernel_request(function, args, {"strided": bool(strided)}, lambda runs: kernel_verdict(
            function.name, runs, reference, args, rtol, atol, outputs=tuple(outputs), requires=requires,
            finishing=tuple(finishing), mistakes=mistakes))

    def _kernel_request(self, function, args, options: dict, judge) -> None:
        """Ask the student's process for ``kernel_runs`` of ``function`` on ``args`` (with ``options``: strided,
        rows, also) and judge the runs here with ``judge(runs) -> problem``; an error the course cannot explain is
        said as the student's own."""
        from autograder.student.checker.kernels import kernel_problem

        if not self._is_student(function):
            raise Unsupported("not a check of the student's function")
        request = {"target": function.name, "kind": "kernel", "args": [encode(a) for a in args],
                   "grad": [False] * len(args), "inplace": False, "upstream": None, **options}
        if "also" in options:
            request["also"] = {key: [encode(a) for a in other] for key, other in options["also"].items()}

        def compare(reply) -> str | None:
            if not (isinstance(reply, dict) and reply.get("error") is None and isinstance(reply.get("runs"), dict)):
                return as_found(function.name, unanswered(reply) or "could not be checked: a malformed answer")
            try:
                runs = {}
                for key, run in list(reply["runs"].items())[:16]:
                    runs[str(key)] = run_outcome(run)
                    for part in ("record", "launches"):
                        if isinstance(run, dict) and part in run:
                            runs[str(key)][part] = decode(run[part])
                runs["given"]
            except (KeyError, TypeError, ValueError) as error:
                return as_found(function.name, f"could not be checked: a malformed answer ({error})")
            try:
                problem = judge(runs)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
                return as_found(function.name, f"could not be checked: a malformed answer ({type(error).__name__})")
            if problem is None and "error" in runs["given"]:
                problem = kernel_problem(function.name, None, None, error=runs["given"]["error"])
            return problem and as_found(function.name, problem, named=True)

        self.pending.append((request, compare))

    def on_pieces(self, function, *names: str) -> _OnPieces:
        """What the test's ``with on_pieces(...)`` does here (``autograder.student.checker.pieces``): the checks inside
        the block run with the course's pieces ``names`` in place of the student's launchers."""
        from autograder.student.checker.pieces import known

        if not self._is_student(function):
            raise Unsupported("on_pieces takes one of the student's objects")
        return _OnPieces(self, tuple(known(names)))

    def check_backward_kernel(self, function, reference, *args, outputs: int = 1, rtol: float = 1e-5,
                              atol: float = 1e-5, names: tuple = (), requires: str | None = None) -> None:
        """What the test's ``check_backward_kernel`` decides (assignment 10): a Function's backward, which launches
        kernels, traced in the student's process (``checker.kernels.backward_of``), judged here like a launcher."""
        from autograder.student.checker.kernels import kernel_verdict

        self._kernel_request(function, args, {"strided": False, "rows": False, "backward": int(outputs)},
                             lambda runs: kernel_verdict(function.name, runs, reference, args, rtol, atol,
                                                         outputs=tuple(names), requires=requires))

    def check_attention_forward(self, function, q, k, v, causal: bool = False, rtol: float = 1e-5,
                                atol: float = 1e-5, requires: str | None = None) -> None:
        """What the test's ``check_attention_forward`` decides (assignment 11): an attention launcher's ``(o, lse)``,
        traced and watched in the student's process (``kernel_runs``), judged here (``checker.attention.forward_verdict``:
        the contract, memory, races, causal tiles skipped, known mistakes named)."""
        from autograder.student.checker.attention import UNMASKED, forward_verdict

        options = {"strided": False, "rows": False, "watch": True}
        if causal:
            options["also"] = {UNMASKED: (q, k, v, False)}
        self._kernel_request(function, (q, k, v, causal), options, lambda runs: forward_verdict(
            function.name, runs, q, k, v, causal, rtol, atol, requires))

    def check_attention_backward(self, function, q, k, v, o, lse, grad_output, causal: bool = False,
                                 rtol: float = 1e-5, atol: float = 1e-5, requires: str | None = None) -> None:
        """What the test's ``check_attention_backward`` decides (assignment 11): an attention backward launcher's
        ``(dq, dk, dv)`` from attention's own o and lse, traced and watched in the student's process, judged here
        (``checker.attention.backward_verdict``)."""
        from autograder.student.checker.attention import _unmasked_backward, backward_verdict

        options = {"strided": False, "rows": False, "watch": True}
        if causal:
            options["also"] = _unmasked_backward(q, k, v, grad_output)
        self._kernel_request(function, (q, k, v, o, lse, grad_output, causal), options, lambda runs: backward_verdict(
            function.name, runs, q, k, v, o, lse, grad_output, causal, rtol, atol, requires))
