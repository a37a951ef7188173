"""The ops layer, the bottom of the package: the ops the package adds to
``funsor.ops`` (:mod:`.extra_ops`), shape rules (:mod:`.shapes`), dtype
kinds (:mod:`.dtypes`), batch rules (:mod:`.batching`) and the abstract
values ops are evaluated on while tracing (:mod:`.symbolic`: arrays known
by shape and dtype only, which refuse Python branches and conversions,
:mod:`.concretization`). It imports nothing else of the package but its
errors."""
