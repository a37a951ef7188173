"""The passes layer: the optimization pipeline over an
:class:`~funsor_lowering.OpProgram` (:mod:`.pipeline`), ``simplify``'s
per-op rules (:mod:`.simplify`) and the rewrites they use, each a module
of its own."""
