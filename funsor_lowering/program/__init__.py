"""The program layer: ``OpProgram`` (the IR, :mod:`.ir`), how programs run
(:mod:`.runtime`, :mod:`.codegen`), the one program editor
(:mod:`.editor`) and the passes built on it (:mod:`.passes`)."""

from ..structure import iter_leaves, iter_paths, map_leaves, path_suffix
from .ir import Operation, OpProgram, ValueType, value_type_of

__all__ = [
    "OpProgram",
    "Operation",
    "ValueType",
    "iter_leaves",
    "iter_paths",
    "map_leaves",
    "path_suffix",
    "value_type_of",
]
