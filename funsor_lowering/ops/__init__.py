"""The ops layer, the bottom of the package: the ops the package adds to
``funsor.ops`` (:mod:`.extra_ops`), shape rules (:mod:`.shapes`), dtype
kinds (:mod:`.dtypes`) and batch rules (:mod:`.batching`). It imports
nothing else of the package."""
