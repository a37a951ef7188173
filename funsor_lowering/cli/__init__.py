"""Command-line tools of ``python -m funsor_lowering``: the demo
(:mod:`.demo`)."""
