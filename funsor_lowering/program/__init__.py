"""The program layer: ``OpProgram`` (the IR, :mod:`.ir`), how programs run
(:mod:`.runtime`, :mod:`.codegen`), the one program editor
(:mod:`.editor`), the passes built on it (:mod:`.passes`) and ``vmap``
(:mod:`.vmap`)."""

from ..structure import iter_leaves, iter_paths, map_leaves, path_suffix
from .ir import Operation, OpProgram, ValueType, value_type_of
from .vmap import VmappedProgram  # registers OpProgram.vmap

__all__ = [
    "OpProgram",
    "Operation",
    "ValueType",
    "VmappedProgram",
    "iter_leaves",
    "iter_paths",
    "map_leaves",
    "path_suffix",
    "value_type_of",
]
