"""The lower-then-compile pipeline: the lowering driver (:mod:`.driver`)
applies the rules of :mod:`.rules` (one file per family of funsor terms)
to a funsor term, the positional layout of named dims (:mod:`.layout`),
``CompilingInterpretation`` (:mod:`.interpretations`), and the compiler
from lowered terms to an :class:`~funsor_lowering.OpProgram`
(:mod:`.compiler`)."""
