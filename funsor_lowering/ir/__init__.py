"""The IR layer: ``OpProgram`` and ``Operation`` (:mod:`.program`), the one
program editor (:mod:`.editor`), names in generated code (:mod:`.naming`)
and nestings of inputs and outputs (:mod:`.structure`). Passes
(:mod:`funsor_lowering.passes`) and the runtime
(:mod:`funsor_lowering.runtime`) build on it."""
