"""jax adapter. Importing it switches funsor to the jax backend if needed,
since funsor 0.4.8 breaks when jax is imported under another backend."""

import funsor

if funsor.get_backend() != "jax":
    funsor.set_backend("jax")

import functools  # noqa: E402
import math  # noqa: E402
import typing  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from funsor import ops  # noqa: E402
from funsor.jax.ops import array as _funsor_jax_arrays  # noqa: E402

from ..ir.structure import iter_leaves  # noqa: E402
from ..ops import hooks  # noqa: E402
from ..ops.dtypes import dtype_kind  # noqa: E402
from ..ops.extra_ops import (  # noqa: E402
    RandnWithKeyOp,
    categorical_sample,
    qr_project,
    relu,
    split_key,
)
from ..ops.logspace_einsum import (  # noqa: E402
    NUMPY_FUNCTIONS,
    ArrayFunctions,
    logspace_einsum,
    logspace_einsum_with,
)
from ..ops.symbolic import SymbolicArray  # noqa: E402
from ..runtime.entry import SelfCheckingJit  # noqa: E402
from . import jax_threefry  # noqa: E402
from .base import ArrayBackend, nested_outputs  # noqa: E402
from .jax_primitives import composed_kernel, logsumexp, specialize  # noqa: E402
from .jax_tiering import tiered  # noqa: E402
from .numpy_backend import numpy_literal  # noqa: E402


def _randn_with_key(prototype, rng_key, shape=()):
    """``extra_ops.randn_with_key`` as funsor's jax ``randn`` draws it."""
    return jax_threefry.normal(rng_key, tuple(shape), dtype=prototype.dtype)


class JaxBackend(ArrayBackend):
    name = "jax"
    # funsor's jax backend dispatches numpy arrays to jax.numpy too.
    array_type_name = "jax.Array or numpy.ndarray"

    def is_array(self, value):
        return isinstance(value, (jax.Array, np.ndarray, np.generic))

    native_array_types = (jax.Array,)

    def native_constant(self, value):
        # jax's own canonical dtype (float64 -> float32 without x64), as
        # any jax op on the numpy array gives.
        if isinstance(value, (np.ndarray, np.generic)):
            return jnp.asarray(value)
        return value

    def dtype_kind(self, value):
        return dtype_kind(value.dtype)

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

    def to_device(self, array, device):
        return jax.device_put(array, device)

    def fast_call(self, op_type, operands, params, dispatched):
        # jax.numpy's argument handling costs more than the work on small
        # arrays: layout ops become jax.lax primitives, and funsor's
        # compositions of jax.numpy calls jitted kernels (jax_primitives);
        # the other ops are jitted once called often (jax_tiering)
        params = tuple(params)
        specialized = specialize(op_type, operands, params)
        if specialized is not None:
            if isinstance(specialized, jax.stages.Wrapped):  # jitted already
                return specialized, (), {}
            hot = tiered(op_type, operands, params, specialized, "jax.lax")
            return (specialized if hot is None else hot), (), {}
        kernel = composed_kernel(op_type, params, dispatched)
        if kernel is not None:
            return kernel, (), {}
        implementation = self.fast_implementation(op_type, params) or dispatched

        def function(*operands):
            return implementation(*operands, *params)

        hot = tiered(op_type, operands, params, function, implementation)
        if hot is not None:
            return hot, (), {}
        return super().fast_call(op_type, operands, params, dispatched)

    keyed = True
    # XLA runs a lax.scan's steps for a fraction of a parallel scan's levels
    scans_chains = True
    projects_qrs = True

    def keeps_gradients(self, value):
        return True  # jax differentiates any array

    # funsor 0.4.8's logaddexp calls ops.max and ops.detach through
    # dispatch; a keyed draw is funsor's jax randn without ops.randn's
    fast_implementations = {
        ops.LogaddexpOp: jnp.logaddexp,
        ops.LogsumexpOp: logsumexp,  # finite gradients over -inf rows
        RandnWithKeyOp: _randn_with_key,
    }
    # jax arrays are immutable, but programs may hold numpy constants
    copy_function, copy_source = staticmethod(jnp.array), "jnp.array"

    def from_numpy(self, array):
        return jnp.asarray(array)

    def abstract_eval(self, fn, args, kwargs, draws=False):
        """Under ``jax.eval_shape``: shapes only, nothing computed (draws
        take their keys as operands: no global RNG)."""
        from ..ops.symbolic import map_symbolic

        leaves = []
        map_symbolic(leaves.append, (args, kwargs))

        def concrete(*arrays):
            # the arrays in place of the symbolic ones, in the same order
            replacements = iter(arrays)
            a, k = map_symbolic(lambda _: next(replacements), (args, kwargs))
            return fn(*a, **k)

        structs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
        result = jax.eval_shape(concrete, *structs)
        return jax.tree_util.tree_map(lambda s: SymbolicArray(s.shape, s.dtype), result)

    def jit(self, program, compiler=None):
        if compiler is not None:
            super().jit(program, compiler)  # raises: jax has one jit

        # jax.jit traces once per input signature; tracing checks the
        # operands (errors name the input), so calls need no checks
        traced = []  # the input signatures traced

        def run(*leaves):
            leaves = program.validate_leaves(leaves)
            traced.append(tuple((tuple(x.shape), x.dtype) for x in leaves))
            return program.run_leaves(leaves)

        if _has_dict(program.output):
            # outputs leave the jitted function as a flat tuple, nested again
            # outside (jax sorts dict keys, which fails for keys of mixed
            # types such as IntEnum and str, and reorders the others)
            jitted = jax.jit(lambda *leaves: tuple(iter_leaves(run(*leaves))))
            function = nested_outputs(program, jitted)
        else:
            jitted = function = jax.jit(run)
        return SelfCheckingJit(function, traced.__len__)

    def prepare_funsor_test(self):
        jax.config.update("jax_platform_name", "cpu")
        jax.config.update("jax_enable_x64", True)

    def tracing_hooks(self):
        # funsor's MonteCarlo splits its key with jax.random.split, outside
        # funsor.ops; while tracing, a traced key splits through the split_key
        # op instead. Other keys (a sampler's own, evaluated under
        # jax.eval_shape) split as jax splits them.
        def split(key, num=2):
            if not isinstance(key, SymbolicArray):
                return hooks.original("jax.random.split")(key, num)
            return tuple(split_key(key, index=i, num=num) for i in range(num))

        return {"jax.random.split": split}


def _has_dict(structure):
    if isinstance(structure, dict):
        return True
    return isinstance(structure, (tuple, list)) and any(map(_has_dict, structure))


def _amin(x, axis=None, keepdims=False):
    return jnp.amin(x, axis, keepdims=keepdims)


# funsor 0.4.8 registers ops.amin as jnp.amax on jax, so every min-reduction
# would silently be a max. Register the true min (this also fixes funsor's own
# eager evaluation in this process).
ops.amin.register(_funsor_jax_arrays)(_amin)


hooks.install_jax_hooks()


relu.register(_funsor_jax_arrays)(jax.nn.relu)


def _jax_branch(predicate, if_true, if_false):
    return jax.lax.cond(predicate, if_true, if_false)  # under jit too


_JAX_FUNCTIONS = ArrayFunctions(
    einsum=jnp.einsum,
    matmul=jnp.matmul,
    permute=jnp.transpose,
    amax=lambda x, axes: jnp.max(x, axes, keepdims=True),
    logsumexp=logsumexp,
    where=jnp.where,
    isfinite=jnp.isfinite,
    exp=jnp.exp,
    log=jnp.log,
    stop_gradient=jax.lax.stop_gradient,
    smallest_accurate=NUMPY_FUNCTIONS.smallest_accurate,  # numpy dtypes
    any=jnp.any,
    branch=_jax_branch,
)


@logspace_einsum.register(typing.Tuple[typing.Union[_funsor_jax_arrays], ...])  # noqa: UP006, UP007
def _logspace_einsum(operands, equation):
    return logspace_einsum_jitted(equation)(*operands)


@functools.lru_cache(maxsize=256)
def logspace_einsum_jitted(equation):
    """``logspace_einsum`` of one equation as one jitted function."""
    return jax.jit(
        lambda *operands: logspace_einsum_with(_JAX_FUNCTIONS, operands, equation)
    )


@split_key.register(_funsor_jax_arrays)
def _split_key(key, index=0, num=2):
    return jax_threefry.split(key, num)[index]


@qr_project.register(_funsor_jax_arrays, _funsor_jax_arrays)
def _qr_project(m, u):
    # one QR of [m | uᵀ] (in m's dtype, as ops.qr's R), its R only; u's
    # leading axes that m lacks (a Gaussian's particles) become more rows
    # of u, so that m is factored once and R keeps m's shape
    rows, cols, k = m.shape[-2], m.shape[-1], u.shape[-2]
    batch = jnp.broadcast_shapes(m.shape[:-2], u.shape[:-2])
    m_batch = (1,) * (len(batch) - (m.ndim - 2)) + m.shape[:-2]
    extra = [i for i, (a, b) in enumerate(zip(m_batch, batch)) if a == 1 and b != 1]
    kept = [i for i in range(len(batch)) if i not in extra]
    order = kept + extra + [len(batch), len(batch) + 1]
    u = jnp.transpose(jnp.broadcast_to(u, batch + (k, rows)), order)
    kept_shape = tuple(batch[i] for i in kept)
    extra_shape = tuple(batch[i] for i in extra)
    u = u.reshape(kept_shape + (math.prod(extra_shape) * k, rows))
    r, projected = _qr_of_concatenation(m.reshape(kept_shape + (rows, cols)), u)
    projected = projected.reshape(kept_shape + extra_shape + (k, cols))
    projected = jnp.transpose(projected, np.argsort(order))
    return r.reshape(m.shape[:-2] + (cols, cols)), projected


def _qr_of_concatenation(m, u):
    """``(R, u @ Q)`` for ``m`` and ``u`` with equal leading axes."""
    cols, dtype = m.shape[-1], jnp.result_type(u, m)
    u_t = jnp.swapaxes(u, -1, -2).astype(m.dtype)
    r = jnp.linalg.qr(jnp.concatenate([m, u_t], -1), mode="r")  # differentiable
    projected = jnp.swapaxes(r[..., :cols, cols:], -1, -2).astype(dtype)
    return r[..., :cols, :cols], projected


# funsor's dispatch reads typing's Tuple / Union, not the builtin forms
@categorical_sample.register(typing.Tuple[typing.Union[_funsor_jax_arrays], ...])  # noqa: UP006, UP007
def _categorical_sample(args, sample_shape=(), keyed=False):
    logits, key = args
    shape = tuple(sample_shape) + logits.shape[:-1]
    return jax.random.categorical(key, logits, shape=shape)


BACKEND = JaxBackend()
