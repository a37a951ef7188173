"""Sub-programs called from terms: the ``segment_output`` op (output
``index`` of a recorded :class:`SegmentProgram`), and
:func:`inline_segments`, which compiling applies to replace each call by
the sub-program's operations.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> from funsor_lowering.program import Operation
    >>> sub = OpProgram([], {"x": Reals[2]}, [Operation(ops.exp, (0,))], (1,))
    >>> segment = SegmentProgram(sub, [Reals[2]])
    >>> call = Operation(SegmentOutputOp(segment=segment, index=0), (0,), packed=True)
    >>> outer = OpProgram([], {"y": Reals[2]}, [call], 1)
    >>> inline_segments(outer).operations
    (Operation(ops.exp, (0,)),)
"""

from funsor import ops
from funsor.domains import find_domain

from .program import OpProgram
from .structure import map_leaves


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
    n_constants, n_inputs = len(program.constants), len(program._input_leaves)
    constants = list(program.constants)
    operations, types = [], []  # operations over ("c"|"i"|"o", k) refs
    refs = [("c", k) for k in range(n_constants)]
    refs += [("i", k) for k in range(n_inputs)]
    calls = {}

    def inline(sub, args):
        sub_refs = []
        for value in sub.constants:
            constants.append(value)
            sub_refs.append(("c", len(constants) - 1))
        sub_refs += args
        for operation, value_type in zip(sub.operations, sub._operation_types):
            operations.append((operation, [sub_refs[a] for a in operation.args]))
            types.append(value_type)
            sub_refs.append(("o", len(operations) - 1))
        return [sub_refs[k] for k in sub.output]

    for k, operation in enumerate(program.operations):
        args = [refs[a] for a in operation.args]
        if isinstance(operation.op, SegmentOutputOp):
            segment = operation.op.defaults["segment"]
            key = (id(segment), tuple(args))
            if key not in calls:
                calls[key] = inline(segment.program, args)
            refs.append(calls[key][operation.op.defaults["index"]])
        else:
            operations.append((operation, args))
            types.append(program._operation_types[k])
            refs.append(("o", len(operations) - 1))

    first = {"c": 0, "i": len(constants), "o": len(constants) + n_inputs}

    def number(ref):
        return first[ref[0]] + ref[1]

    return OpProgram(
        constants,
        program.input_types,
        [op.replace(args=tuple(map(number, args))) for op, args in operations],
        map_leaves(lambda n: number(refs[n]), program.output),
        value_types=types,
        backend=program.backend,
    )
