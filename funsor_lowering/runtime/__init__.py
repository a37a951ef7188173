"""The runtime layer: how a program runs. Generated Python
(:mod:`.codegen`), the call and jit entries (:mod:`.entry`) and ``vmap``
(:mod:`.vmap`)."""
