"""The passes layer: rewrites of :class:`~funsor_lowering.OpProgram` s, one
pass per module, each returning a :class:`~funsor_lowering.ir.editor.PassResult`
(:mod:`.folding`, :mod:`.simplify`, :mod:`.broadcasts`, :mod:`.matmuls`,
:mod:`.common_subexpressions`, :mod:`.dead_code`, :mod:`.vectorize`,
:mod:`.qr_algebra`), and :func:`~.pipeline.optimize`, which runs them
(:mod:`.pipeline`). ``simplify`` 's per-op rules use the rewrites of
:mod:`.basic_index`, :mod:`.cat_parts`, :mod:`.cat_slices`,
:mod:`.cholesky_algebra`, :mod:`.vector_products` and
:mod:`.row_broadcasts`."""
