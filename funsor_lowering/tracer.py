"""``trace_function``: record the ``funsor.ops`` applications a function
makes on concrete arrays. (Placeholder until the tracer lands.)"""


def trace_function(fn, kwargs, *, allow_constants=False):
    raise NotImplementedError("trace_function is not implemented yet")
