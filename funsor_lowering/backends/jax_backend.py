"""jax adapter. Importing it switches funsor to the jax backend if needed,
since funsor 0.4.8 breaks when jax is imported under another backend."""

import funsor

if funsor.get_backend() != "jax":
    funsor.set_backend("jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from funsor import ops  # noqa: E402
from funsor.jax.ops import array as _funsor_jax_arrays  # noqa: E402

from .base import ArrayBackend  # noqa: E402
from .numpy_backend import numpy_dtype_kind, numpy_literal  # noqa: E402


class JaxBackend(ArrayBackend):
    name = "jax"
    # funsor's jax backend dispatches numpy arrays to jax.numpy too.
    array_type_name = "jax.Array or numpy.ndarray"

    def is_array(self, value):
        return isinstance(value, (jax.Array, np.ndarray, np.generic))

    def dtype_kind(self, value):
        return numpy_dtype_kind(value.dtype)

    def as_traceable(self, value):
        return np.asarray(value) if isinstance(value, np.generic) else value

    def array_literal(self, value):
        if isinstance(value, (np.ndarray, np.generic)):
            return numpy_literal(value), ("import numpy as np",)
        source = numpy_literal(np.asarray(value))
        return f"jnp.asarray({source})", (
            "import numpy as np",
            "import jax.numpy as jnp",
        )


def _amin(x, axis=None, keepdims=False):
    return jnp.amin(x, axis, keepdims=keepdims)


# funsor 0.4.8 registers ops.amin as jnp.amax on jax, so every min-reduction
# would silently be a max. Register the true min (this also fixes funsor's own
# eager evaluation in this process).
ops.amin.register(_funsor_jax_arrays)(_amin)

BACKEND = JaxBackend()
