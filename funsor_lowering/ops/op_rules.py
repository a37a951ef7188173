"""Rules registered per op type: what a pass or transformation does with
each op lives in one table per concern, keyed by op type, instead of an
``isinstance`` chain.

Example::

    >>> from funsor import ops
    >>> spelling = OpRules("spelling")
    >>> @spelling.register(ops.AddOp, ops.MulOp)
    ... def _infix(op):
    ...     return {"add": "+", "mul": "*"}[op.name]
    >>> spelling.rule(ops.add)(ops.add), spelling.rule(ops.sub)
    ('+', None)
"""


class OpRules:
    """One rule per op type, looked up along the op's type's MRO: the rule
    of the most specific registered class applies (a subclass inherits its
    base's rule unless it has its own)."""

    def __init__(self, name):
        self.name = name
        self._rules = {}  # op type -> rule
        self._found = {}  # op type -> rule or None (filled on first lookup)

    def register(self, *op_types):
        """Register the decorated function as the rule of ``op_types``."""

        def register(rule):
            for op_type in op_types:
                if op_type in self._rules:
                    raise ValueError(f"{self.name}: {op_type.__name__} has a rule")
                self._rules[op_type] = rule
            self._found.clear()
            return rule

        return register

    def rule(self, op):
        """The rule for ``op`` (an op instance), or ``None``."""
        op_type = type(op)
        try:
            return self._found[op_type]
        except KeyError:
            pass
        found = next(
            (self._rules[c] for c in op_type.__mro__ if c in self._rules), None
        )
        self._found[op_type] = found
        return found
