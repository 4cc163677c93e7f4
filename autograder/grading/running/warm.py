"""The warm process that grading forks from, and the IPython shell each forked child runs.

Importing this module is the expensive part of starting a kernel (torch alone is ~2 s), so
the grader's forkserver imports it once (``autograder.grading.running.executor``). ``new_shell()`` then builds,
inside each child, an IPython shell whose outputs are recorded in nbformat's shape instead of
being printed: what ipykernel would have sent to Jupyter, without a kernel or ZeroMQ.
"""

from __future__ import annotations

import gc
import io
import os
import sys
import threading

# Assignment 10's Triton kernels run in Triton's interpreter in every grading process (CPU tensors, no
# GPU needed): set before anything imports triton (torch may), here and again in each sandboxed child
# (autograder.grading.running.confinement.sandbox), since a kernel reads it when it is defined.
os.environ["TRITON_INTERPRET"] = "1"

import IPython  # noqa: F401  (imported here so children need not)
import IPython.core.completer  # noqa: F401  (this and the IPython modules below: what every new shell imports)
import IPython.core.completerlib  # noqa: F401
import IPython.core.crashhandler  # noqa: F401
import IPython.core.logger  # noqa: F401
import IPython.core.magics  # noqa: F401
import IPython.core.magics.ast_mod  # noqa: F401
import IPython.core.magics.execution  # noqa: F401
import IPython.core.oinspect  # noqa: F401
import matplotlib
import matplotlib.pyplot  # noqa: F401
import matplotlib_inline.backend_inline  # noqa: F401
import numpy  # noqa: F401
import torch  # noqa: F401
import torch._dynamo  # noqa: F401  (torch.func.grad, as in 01, imports it on first use: ~0.5 s a notebook)
import torch.autograd.gradcheck  # noqa: F401
import torch.func  # noqa: F401
import torch.fx.experimental.symbolic_shapes  # noqa: F401  (torch.autograd.grad imports it on first use: ~1 s)
import torch.utils.benchmark  # noqa: F401
import torch._subclasses.schema_check_mode  # noqa: F401  (torch.func imports it on first use)
# What a notebook's first torch.compile imports (09 compiles eight times): ~0.75 s of CPU on first use
# in every compiling notebook, once here (~0.7 s, +40 MB shared by every fork). The nine roots of it.
import torch._dynamo.backends.debugging  # noqa: F401  (aot_eager)
import torch._dynamo.repro.after_dynamo  # noqa: F401
import torch._functorch.aot_autograd  # noqa: F401
import torch._functorch._aot_autograd.subclass_codegen  # noqa: F401
import torch._inductor.debug  # noqa: F401
import torch._inductor.pattern_matcher  # noqa: F401
import torch._inductor.sizevars  # noqa: F401
import torch.export._trace  # noqa: F401
import torch.fx.experimental.validator  # noqa: F401
import PIL.Image
import stack_data  # noqa: F401  (IPython formats tracebacks with it)
import pygments.formatters.terminal256  # noqa: F401  (and this)
from IPython.core.displayhook import DisplayHook
from IPython.core.error import UsageError
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from autograder import (  # noqa: F401  (the checker, as the notebooks import it)
    check_built_on, check_callable, check_custom_op, check_forward, check_function, check_kernel, check_saved, check_values, check_with, draw_graph,
)
import autograder.student.checker.messages  # noqa: F401  (NOT_DONE, for an exercise left as released)
import autograder.grading.running.confinement.one_thread
import autograder.grading.running.kernel
try:  # what 10's notebooks import (~0.3 s), once here; triton installs on Linux x86-64 only
    import triton.language  # noqa: F401
    import triton.runtime.interpreter  # noqa: F401
except ImportError:
    pass
else:  # every grading process's kernels run in the interpreter without the work it does for nothing
    import autograder.student.kernels

    autograder.student.kernels.lighten_interpreter()
import autograder.grading.running.judging.tamper

matplotlib.pyplot.switch_backend("module://matplotlib_inline.backend_inline")  # what each shell enables
PIL.Image.init()  # the image format plugins, otherwise loaded by each child's first figure
# torch.fx runs every traced graph under a (silent) tqdm bar, whose first use makes tqdm's class-wide
# multiprocessing lock: made in a child that then exits, it is reported by `check` as "leaked semaphore
# objects" (09, whose notebook compiles). A child grades one notebook in one process: a thread lock does.
try:
    import tqdm
except ImportError:  # (no tqdm: torch.hub's stand-in takes no lock)
    pass
else:
    tqdm.tqdm.set_lock(threading.RLock())
# The thread pools of the libraries loaded (numpy's BLAS), found once here: each examinee sizes them to its one thread.
autograder.grading.running.confinement.one_thread.find_pools()
# The tamper guard's record of the genuine objects, taken once here, where no student code has run (kept by the
# tamper module alone: the examinee takes it from there, out of its answers' reach).
autograder.grading.running.judging.tamper.genuine()

OUT_OF_MEMORY_TEXT = ("can't allocate memory", "not enough memory", "out of memory")


class OutputRecorder:
    """Collects one cell's outputs as nbformat v4 output dicts.

    What student code prints is untrusted: a cell keeps at most ``max_chars`` characters of text
    and ``max_data_chars`` of figures and other rich output, and every line of a hidden test
    (``hidden_lines``) is blanked out of them, so code that prints the test running it shows
    nothing of what it hides.
    """

    def __init__(self) -> None:
        self.outputs: list[dict] = []
        self.status = "ok"
        self.hidden = False
        self.limit = 0.0
        self.memory: int | None = None
        self.chars_left = 0
        self.max_chars = 100_000
        self.max_data_chars = 2_000_000
        self.data_left = 0
        self.hidden_lines: list[str] = []

    def begin(self, hidden: bool, limit: float, memory: int | None) -> None:
        self.outputs, self.status = [], "ok"
        self.hidden, self.limit, self.memory = hidden, limit, memory
        self.chars_left, self.data_left = self.max_chars, self.max_data_chars

    def end(self) -> tuple[list[dict], str]:
        return [_without(output, self.hidden_lines) for output in self.outputs], self.status

    def stream(self, name: str, text: str) -> None:
        if self.chars_left <= 0 or not text:
            return
        if len(text) > self.chars_left:
            text = text[: self.chars_left] + f"\n... output truncated (more than {self.max_chars} characters) ...\n"
        self.chars_left -= len(text)
        last = self.outputs[-1] if self.outputs else None
        if last and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": name, "text": text})

    def _bounded(self, data: dict) -> dict:
        size = sum(len(v) if isinstance(v, str) else len(str(v)) for v in data.values())
        if size <= self.data_left:
            self.data_left -= size
            return data
        self.data_left = 0
        return {"text/plain": f"... output left out ({size} characters; a cell may show {self.max_data_chars}) ..."}

    def display(self, data: dict, metadata: dict | None) -> None:
        self.outputs.append({"output_type": "display_data", "data": self._bounded(data), "metadata": metadata or {}})

    def result(self, data: dict, metadata: dict | None, count: int) -> None:
        self.outputs.append({"output_type": "execute_result", "execution_count": count,
                             "data": self._bounded(data), "metadata": metadata or {}})

    def clear(self) -> None:
        self.outputs.clear()

    def error(self, name: str, value: str, traceback: list[str]) -> None:
        if name == "CellTimeout":
            self.status = "timed out"
            name, value = "TimeoutError", f"timed out after {self.limit:g} s (an infinite loop?)"
            traceback = [f"{name}: {value}"] if self.hidden else traceback[:-1] + [f"{name}: {value}"]
        elif name == "MemoryError" or any(t in value for t in OUT_OF_MEMORY_TEXT):
            self.status = "ran out of memory"
            limit = f" (a notebook may use {self.memory / 1024**3:g} GB)" if self.memory else ""
            name, value = "MemoryError", f"ran out of memory{limit}: {value}".rstrip(": ")
        elif name == "TamperingFound" and self.status == "ok":  # see autograder.grading.running.judging.tamper
            self.status = "tampering found"
        elif name == "NotImplementedError" and not value:  # an exercise left as released: said as such
            value = autograder.student.checker.messages.NOT_DONE
        if len(value) > 10_000:
            value = value[:10_000] + " ... (message truncated)"
        if self.hidden or sum(map(len, traceback)) > self.max_chars:
            traceback = [f"{name}: {value}"]
        self.outputs.append({"output_type": "error", "ename": name, "evalue": value, "traceback": traceback})

    def timeout(self) -> None:
        self.error("CellTimeout", "", [])


def _without(value, lines: list[str]):
    """``value`` (an output, or part of one) with every occurrence of ``lines`` blanked out."""
    if isinstance(value, str):
        for line in lines:
            if line in value:
                value = value.replace(line, "<hidden test line>")
        return value
    if isinstance(value, dict):
        return {k: _without(v, lines) for k, v in value.items()}
    if isinstance(value, list):
        return [_without(v, lines) for v in value]
    return value


class RecordedStream(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` for a grading child: text goes to the recorder."""

    def __init__(self, recorder: OutputRecorder, name: str) -> None:
        self.recorder, self.name = recorder, name

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        if not isinstance(text, str):
            text = str(text)
        self.recorder.stream(self.name, text)
        return len(text)

    def isatty(self) -> bool:
        return False


class RecordingDisplayPublisher(DisplayPublisher):
    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs) -> None:
        self.shell.recorder.display(data, metadata)

    def clear_output(self, wait=False) -> None:
        self.shell.recorder.clear()


class RecordingDisplayHook(DisplayHook):
    """Turns a cell's last expression into an ``execute_result`` (nbgrader reads partial credit there)."""

    def start_displayhook(self) -> None:
        self._format = None

    def write_output_prompt(self) -> None:
        pass

    def write_format_data(self, format_dict, md_dict=None) -> None:
        self._format = (format_dict, md_dict)

    def finish_displayhook(self) -> None:
        if self._format is not None:
            self.shell.recorder.result(self._format[0], self._format[1], self.prompt_count)


def _in_group(value) -> bool:
    """Whether ``value`` or an exception in its context is an exception group (IPython prints those itself)."""
    seen = set()
    while value is not None and id(value) not in seen:
        if isinstance(value, BaseExceptionGroup):
            return True
        seen.add(id(value))
        value = value.__context__
    return False


class GradingShell(InteractiveShell):
    """An IPython shell that records what a kernel would have sent to the notebook."""

    displayhook_class = RecordingDisplayHook
    display_pub_class = RecordingDisplayPublisher

    def showtraceback(self, exc_tuple=None, filename=None, tb_offset=None, exception_only=False,
                      running_compiled_code=False):
        """An error in a cell holding hidden tests is shown as its last line only (``OutputRecorder.error``),
        so its traceback is not formatted at all: IPython's formatting reads and parses the source of
        every frame, ~0.05 s of CPU an error. Errors IPython shows in other ways (syntax and usage
        errors, exception groups, exceptions that render themselves) take IPython's own path."""
        if self.recorder.hidden and not exception_only and not self.call_pdb:
            try:
                etype, value, _ = self._get_exc_info(exc_tuple)  # also sets sys.last_value, as IPython does
            except ValueError:
                etype = None
            if (etype is not None and not issubclass(etype, (SyntaxError, UsageError))
                    and not _in_group(value) and not hasattr(value, "_render_traceback_")):
                self._showtraceback(etype, value, [])
                return
        super().showtraceback(exc_tuple, filename, tb_offset, exception_only, running_compiled_code)

    def _showtraceback(self, etype, evalue, stb):
        self.recorder.error(etype.__name__, str(evalue), list(stb))

    def enable_gui(self, gui=None):
        """Inline figures need no GUI event loop (``%matplotlib inline`` asks for none)."""

    def show_usage_error(self, exc):
        self.recorder.error("UsageError", str(exc), [f"UsageError: {exc}"])

    def ask_exit(self):
        """``exit()`` or ``quit()`` in a cell: nothing to end here, the next cell runs (as in a kernel)."""

    def _format_exception_for_storage(self, exception, filename=None, running_compiled_code=False):
        """What IPython keeps of an error for its history, which grading never reads: the name and
        message only. (IPython formats the whole traceback a second time for it, which doubled the
        cost of every cell with an error; the traceback shown in the cell's output is unchanged.)"""
        return {"ename": type(exception).__name__, "evalue": str(exception), "traceback": []}


def new_shell(hidden_lines: list[str] = ()) -> GradingShell:
    """A fresh shell that records outputs, with the course's grading-kernel settings.

    Text written to stderr is recorded as stdout: nbgrader scores a test cell with any stderr
    text 0, but a test passes or fails by raising, not by what torch or the student printed.
    """
    recorder = OutputRecorder()
    recorder.hidden_lines = list(hidden_lines)
    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    shell = GradingShell.instance(config=config)
    shell.recorder = recorder
    sys.stdout = RecordedStream(recorder, "stdout")
    sys.stderr = RecordedStream(recorder, "stdout")
    shell.enable_matplotlib("inline")
    shell.tamper_guard = autograder.grading.running.kernel.load_ipython_extension(shell, autograder.grading.running.judging.tamper.genuine())
    return shell


# Last, once everything above is imported: what the warm process holds lives as long as it does,
# so it is moved out of the garbage collector's reach (gc.freeze, after a last collection). A
# child's collections then walk only its own objects, not torch's hundreds of thousands: a full
# collection falling in a notebook's cells cost ~0.2 s of CPU, and whether one fell depended on
# how many objects the imports happened to leave counted.
gc.collect()
gc.freeze()
