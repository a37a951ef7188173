"""Sub-programs called from terms: the ``segment_output`` op (output
``index`` of a recorded :class:`SegmentProgram`), and
:func:`inline_segments`, which compiling applies to replace each call by
the sub-program's operations.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> from funsor_lowering.ir.program import Operation, OpProgram
    >>> sub = OpProgram([], {"x": Reals[2]}, [Operation(ops.exp, (0,))], (1,))
    >>> segment = SegmentProgram(sub, [Reals[2]])
    >>> call = Operation(SegmentOutputOp(segment=segment, index=0), (0,), packed=True)
    >>> outer = OpProgram([], {"y": Reals[2]}, [call], 1)
    >>> inline_segments(outer).operations
    (Operation(ops.exp, (0,)),)
"""

from funsor import ops
from funsor.domains import find_domain

from ..ir.editor import Editor


class SegmentProgram:
    """A segment's recorded sub-program and the funsor domain (positional
    layout) of each of its outputs."""

    def __init__(self, program, domains):
        self.program = program
        self.domains = tuple(domains)

    def run(self, args):
        return self.program(**dict(zip(self.program.input_types, args)))

    def __repr__(self):
        return f"SegmentProgram({len(self.program.operations)} ops)"


@ops.FinitaryOp.make(module_name=__name__)
def segment_output(args, segment=None, index=0):
    """Output ``index`` of ``segment`` (a :class:`SegmentProgram`) run on
    ``args``. Compiling inlines the sub-program instead of calling this."""
    return segment.run(args)[index]


SegmentOutputOp = type(segment_output)


@find_domain.register(SegmentOutputOp)
def find_domain_segment_output(op, domains):
    return op.defaults["segment"].domains[op.defaults["index"]]


def inline_segments(program):
    """``program`` with each ``segment_output`` call replaced by its
    segment's operations, inlined once per segment and arguments."""
    if not any(isinstance(o.op, SegmentOutputOp) for o in program.operations):
        return program
    calls = {}

    def inline(editor, operation, args, value_type):
        if not isinstance(operation.op, SegmentOutputOp):
            return None
        segment = operation.op.defaults["segment"]
        key = (id(segment), tuple(args))
        if key not in calls:
            calls[key] = editor.inline(segment.program, args)
        return calls[key][operation.op.defaults["index"]]

    editor = Editor.of(program)
    return editor.finish(editor.copy_operations(program, inline))


__all__ = ["SegmentOutputOp", "SegmentProgram", "inline_segments", "segment_output"]
