"""The dead-code pass: operations and constants no output needs go."""

from ..ir.editor import Editor, PassResult, pass_result


def eliminate_dead_code(program):
    """Drop operations and constants that no output depends on."""
    editor = Editor.of(program)
    output = editor.copy_operations(program)
    live = editor.live(output)
    values = len(program.constants) + len(program.operations)
    if sum(ref.kind != "i" for ref in live) == values:
        return PassResult(program, False)  # every value is live
    return pass_result(program, editor.finish(output, live))
