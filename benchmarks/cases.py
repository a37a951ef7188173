"""Benchmark cases: small array expressions (``affine``, ``chain50``) and
discrete models through ``funsor.sum_product`` (HMM, plated, tree).

Each case gives its input shapes, its computation built from whatever stands
for an input (a ``Tensor`` of data for funsor eager, a ``Variable`` for the
compilers), and a hand-written implementation per backend.
"""

import functools

import funsor
from funsor import ops
from funsor.domains import Reals
from funsor.interpretations import eager, reflect
from funsor.interpreter import reinterpret
from funsor.optimizer import apply_optimizer
from funsor.sum_product import sum_product
from funsor.tensor import Tensor
from funsor.terms import Variable

LOG_2PI = 1.8378770664093453


class Case:
    name = None

    def shapes(self):
        """Input name -> shape."""
        raise NotImplementedError

    def build(self, inputs):
        """The computation, given one funsor (Tensor or Variable) per input."""
        raise NotImplementedError

    def hand(self, lib):
        """A hand-written implementation taking the inputs as keywords, that
        follows the computation's own structure."""
        raise NotImplementedError

    def hand_fast(self, lib):
        """What a performance-minded person would write instead (vectorized
        where possible, fewest calls), or ``None`` where ``hand`` is that."""
        return None

    def hand_scan(self):
        """On jax: a ``jax.lax.scan`` version (the runner jits it), or
        ``None`` where the computation has no scan."""
        return None

    def symbolic(self):
        """The computation over Variables, for compilers."""
        variables = {k: Variable(k, Reals[s]) for k, s in self.shapes().items()}
        with reflect:
            return self.build(variables)

    def funsor_eager(self, **arrays):
        """What a funsor user pays per call."""
        return self.build({k: Tensor(v) for k, v in arrays.items()}).data


class Affine(Case):
    """``((a @ x + b) * x).exp()``, a: 3x3 (funsor's compiler benchmark)."""

    name = "affine"

    def shapes(self):
        return {"a": (3, 3), "x": (3,), "b": (3,)}

    def build(self, inputs):
        a, x, b = inputs["a"], inputs["x"], inputs["b"]
        return ((a @ x + b) * x).exp()

    def hand(self, lib):
        exp = lib.exp

        def affine(a, x, b):
            return exp((a @ x + b) * x)

        return affine


class Chain(Case):
    """``n`` elementwise ops on a ``Reals[8]`` input."""

    def __init__(self, n=50):
        self.n = n
        self.name = f"chain{n}"

    def shapes(self):
        return {"x": (8,)}

    def build(self, inputs):
        x = inputs["x"]
        for k in range(self.n):
            step = k % 4
            if step == 0:
                x = x * 1.01
            elif step == 1:
                x = x + 0.5
            elif step == 2:
                x = ops.tanh(x)
            else:
                x = -x
        return x

    def hand(self, lib):
        tanh, n = lib.tanh, self.n

        def chain(x):
            for k in range(n):
                step = k % 4
                if step == 0:
                    x = x * 1.01
                elif step == 1:
                    x = x + 0.5
                elif step == 2:
                    x = tanh(x)
                else:
                    x = -x
            return x

        return chain

    def hand_fast(self, lib):
        """The chain with its negations folded away by hand: ``-x * c`` is
        ``x * -c``, ``-x + c`` is ``c - x``, and ``tanh`` is odd."""
        tanh, steps, negate = lib.tanh, [], False
        for k in range(self.n):
            step = k % 4
            if step == 0:
                steps.append(("mul", -1.01 if negate else 1.01))
                negate = False
            elif step == 1:
                steps.append(("rsub" if negate else "add", 0.5))
                negate = False
            elif step == 2:
                steps.append(("tanh", None))  # tanh(-x) = -tanh(x)
            else:
                negate = not negate
        if negate:
            steps.append(("neg", None))

        def chain(x):
            for kind, c in steps:
                if kind == "mul":
                    x = x * c
                elif kind == "add":
                    x = x + c
                elif kind == "rsub":
                    x = c - x
                elif kind == "tanh":
                    x = tanh(x)
                else:
                    x = -x
            return x

        return chain


class SumProductCase(Case):
    """A log-space ``sum_product`` over factors."""

    plates = frozenset()

    def factors(self, inputs):
        """The factors, given one funsor (Tensor or Variable) per input."""
        raise NotImplementedError

    def eliminate(self):
        raise NotImplementedError

    def lazy_expr(self, inputs):
        with reflect:
            expr = sum_product(
                ops.logaddexp,
                ops.add,
                self.factors(inputs),
                self.eliminate(),
                self.plates,
            )
            return apply_optimizer(expr)

    def symbolic(self):
        variables = {k: Variable(k, Reals[s]) for k, s in self.shapes().items()}
        return self.lazy_expr(variables)

    def funsor_eager(self, **arrays):
        """What a funsor user pays per call: lazy build, optimize, evaluate."""
        expr = self.lazy_expr({k: Tensor(v) for k, v in arrays.items()})
        with eager:
            return reinterpret(expr).data


class HMM(SumProductCase):
    """A discrete HMM with ``T`` hidden steps of ``S`` states."""

    def __init__(self, T, S=5):
        self.T, self.S = T, S
        self.name = f"hmm_T{T}"

    def shapes(self):
        return {"init": (self.S,), "trans": (self.T, self.S, self.S)}

    def factors(self, inputs):
        init, trans = inputs["init"], inputs["trans"]
        factors = [init["x0"]]
        for t in range(1, self.T):
            factors.append(trans[t][f"x{t - 1}", f"x{t}"])
        return factors

    def eliminate(self):
        return frozenset(f"x{t}" for t in range(self.T))

    def hand(self, lib):
        lse = lib.logsumexp

        def hmm(init, trans):
            alpha = init
            for t in range(1, self.T):
                alpha = lse(alpha[:, None] + trans[t], 0)
            return lse(alpha, 0)

        return hmm

    def hand_fast(self, lib):
        """The forward pass with the fewest calls: transitions transposed
        once, then one add and one reduction per step."""
        lse, swapaxes = lib.logsumexp, lib.swapaxes

        def hmm(init, trans):
            alpha = init
            for step in swapaxes(trans[1:], 1, 2):
                alpha = lse(alpha + step, 1)
            return lse(alpha, 0)

        return hmm

    def hand_scan(self):
        import jax
        import jax.numpy as jnp
        from jax.scipy.special import logsumexp

        def step(alpha, trans_t):
            return logsumexp(alpha + trans_t, 1), None

        def hmm(init, trans):
            alpha, _ = jax.lax.scan(step, init, jnp.swapaxes(trans[1:], 1, 2))
            return logsumexp(alpha, 0)

        return hmm


class EmissionHMM(SumProductCase):
    """A discrete HMM with emission factors: ``T`` hidden steps of ``S``
    states, a transition factor between ``x_{t-1}`` and ``x_t`` and an
    emission factor of ``x_t`` (the observed likelihood) at every step."""

    def __init__(self, T, S=5):
        self.T, self.S = T, S
        self.name = f"hmm_emit_T{T}"

    def shapes(self):
        return {
            "init": (self.S,),
            "trans": (self.T, self.S, self.S),
            "emit": (self.T, self.S),
        }

    def factors(self, inputs):
        init, trans, emit = inputs["init"], inputs["trans"], inputs["emit"]
        factors = [init["x0"], emit[0]["x0"]]
        for t in range(1, self.T):
            factors.append(trans[t][f"x{t - 1}", f"x{t}"])
            factors.append(emit[t][f"x{t}"])
        return factors

    def eliminate(self):
        return frozenset(f"x{t}" for t in range(self.T))

    def hand(self, lib):
        lse = lib.logsumexp

        def hmm(init, trans, emit):
            alpha = init + emit[0]
            for t in range(1, self.T):
                alpha = lse(alpha[:, None] + trans[t], 0) + emit[t]
            return lse(alpha, 0)

        return hmm

    def hand_fast(self, lib):
        """The forward pass with the fewest calls (see ``HMM.hand_fast``)."""
        lse, swapaxes = lib.logsumexp, lib.swapaxes

        def hmm(init, trans, emit):
            alpha = init + emit[0]
            for step, evidence in zip(swapaxes(trans[1:], 1, 2), emit[1:]):
                alpha = lse(alpha + step, 1) + evidence
            return lse(alpha, 0)

        return hmm

    def hand_scan(self):
        import jax
        import jax.numpy as jnp
        from jax.scipy.special import logsumexp

        def step(alpha, xs):
            trans_t, emit_t = xs
            return logsumexp(alpha + trans_t, 1) + emit_t, None

        def hmm(init, trans, emit):
            xs = (jnp.swapaxes(trans[1:], 1, 2), emit[1:])
            alpha, _ = jax.lax.scan(step, init + emit[0], xs)
            return logsumexp(alpha, 0)

        return hmm


class SeparateHMM(SumProductCase):
    """A discrete HMM whose ``T - 1`` transition matrices are separate
    inputs (``trans1 .. trans{T-1}``), as unrolled models and per-step
    sites give them."""

    def __init__(self, T, S=5):
        self.T, self.S = T, S
        self.name = f"hmm_sep_T{T}"

    def shapes(self):
        shapes = {"init": (self.S,)}
        shapes.update({f"trans{t}": (self.S, self.S) for t in range(1, self.T)})
        return shapes

    def factors(self, inputs):
        factors = [inputs["init"]["x0"]]
        for t in range(1, self.T):
            factors.append(inputs[f"trans{t}"][f"x{t - 1}", f"x{t}"])
        return factors

    def eliminate(self):
        return frozenset(f"x{t}" for t in range(self.T))

    def hand(self, lib):
        lse, T = lib.logsumexp, self.T

        def hmm(init, **trans):
            alpha = init
            for t in range(1, T):
                alpha = lse(alpha[:, None] + trans[f"trans{t}"], 0)
            return lse(alpha, 0)

        return hmm

    def hand_fast(self, lib):
        """The forward pass with the fewest calls: each matrix read
        transposed (a view), one add and one reduction per step."""
        lse, T = lib.logsumexp, self.T

        def hmm(init, **trans):
            alpha = init
            for t in range(1, T):
                alpha = lse(alpha + trans[f"trans{t}"].T, 1)
            return lse(alpha, 0)

        return hmm

    def hand_scan(self):
        import jax
        import jax.numpy as jnp
        from jax.scipy.special import logsumexp

        def step(alpha, trans_t):
            return logsumexp(alpha + trans_t, 1), None

        def hmm(init, **trans):
            steps = jnp.stack([trans[f"trans{t}"].T for t in range(1, self.T)])
            alpha, _ = jax.lax.scan(step, init, steps)
            return logsumexp(alpha, 0)

        return hmm


class Plated(SumProductCase):
    """A global variable ``z`` and a plate of ``N`` local variables ``y``."""

    plates = frozenset({"i"})

    def __init__(self, N=20, S=5, Y=3):
        self.N, self.S, self.Y = N, S, Y
        self.name = f"plated_N{N}"

    def shapes(self):
        return {
            "prior": (self.S,),
            "f": (self.N, self.S, self.Y),
            "g": (self.N, self.Y),
        }

    def factors(self, inputs):
        return [
            inputs["prior"]["z"],
            inputs["f"]["i", "z", "y"],
            inputs["g"]["i", "y"],
        ]

    def eliminate(self):
        return frozenset({"z", "y", "i"})

    def hand(self, lib):
        lse = lib.logsumexp

        def plated(prior, f, g):
            local = lse(f + g[:, None, :], 2)  # (N, S): y summed out
            return lse(prior + local.sum(0), 0)

        return plated


class Tree(SumProductCase):
    """A tree of discrete variables: r -> (a, b), a -> (c, d)."""

    name = "tree"
    EDGES = (("r", "a"), ("r", "b"), ("a", "c"), ("a", "d"))

    def __init__(self, S=5):
        self.S = S

    def shapes(self):
        shapes = {"root": (self.S,)}
        shapes.update({f"e{n}": (self.S, self.S) for n in range(len(self.EDGES))})
        return shapes

    def factors(self, inputs):
        factors = [inputs["root"]["r"]]
        for n, (u, w) in enumerate(self.EDGES):
            factors.append(inputs[f"e{n}"][u, w])
        return factors

    def eliminate(self):
        return frozenset("rabcd")

    def hand(self, lib):
        lse = lib.logsumexp

        def tree(root, e0, e1, e2, e3):
            belief_a = lse(e2, 1) + lse(e3, 1)
            msg_a = lse(e0 + belief_a, 1)
            msg_b = lse(e1, 1)
            return lse(root + msg_a + msg_b, 0)

        return tree


class SeparateTree(SumProductCase):
    """A complete binary tree of depth ``D`` whose ``T = 2^(D+1) - 2`` edge
    factors are separate inputs (``e0 .. e{T-1}``, node ``k + 1``'s parent
    ``k // 2``), and a root factor: per-node sites of a tree-structured
    model."""

    def __init__(self, D=6, S=5):
        self.D, self.S = D, S
        self.T = 2 ** (D + 1) - 2
        self.name = f"tree_sep_T{self.T}"

    def shapes(self):
        shapes = {"root": (self.S,)}
        shapes.update({f"e{k}": (self.S, self.S) for k in range(self.T)})
        return shapes

    def factors(self, inputs):
        factors = [inputs["root"]["v0"]]
        for k in range(self.T):
            factors.append(inputs[f"e{k}"][f"v{k // 2}", f"v{k + 1}"])
        return factors

    def eliminate(self):
        return frozenset(f"v{i}" for i in range(self.T + 1))

    def hand(self, lib):
        """Messages from the last node to the root, one edge at a time."""
        lse, T = lib.logsumexp, self.T

        def tree(root, **edges):
            belief = {}
            for i in range(T, 0, -1):
                edge = edges[f"e{i - 1}"]
                below = belief.pop(i, None)
                message = lse(edge if below is None else edge + below, 1)
                p = (i - 1) // 2
                belief[p] = message if p not in belief else belief[p] + message
            return lse(root + belief[0], 0)

        return tree

    def hand_fast(self, lib):
        """Level by level: each depth's edges stacked, one add, one
        reduction and one pairwise sum per depth."""
        lse, D, S = lib.logsumexp, self.D, self.S

        def tree(root, **edges):
            below = None
            for d in range(D, 0, -1):
                level = range(2**d - 1, 2 ** (d + 1) - 1)
                stacked = lib.cat([edges[f"e{i - 1}"][None] for i in level])
                if below is not None:
                    stacked = stacked + below[:, None, :]
                below = lse(stacked, 2).reshape(len(level) // 2, 2, S).sum(1)
            return lse(root + below[0], 0)

        return tree


class TracedCase(Case):
    """A function of arrays that uses funsor Gaussians inside; ours is its
    ``trace_function`` program."""

    def function(self):
        """The function of backend arrays funsor runs eagerly."""
        raise NotImplementedError

    def program(self, arrays):
        from funsor_lowering import trace_function

        return trace_function(self.function(), arrays)

    def funsor_eager(self, **arrays):
        return self.function()(**arrays)


class Kalman(TracedCase):
    """log-partition of a Gaussian chain of ``T`` steps over ``Reals[D]``:
    funsor's ``sequential_sum_product`` over Gaussian transition factors."""

    D = 2

    def __init__(self, T):
        self.T = T
        self.name = f"kalman_T{T}"

    def shapes(self):
        D, T = self.D, self.T
        return {"w0": (D,), "P0": (D, D), "w": (T, 2 * D), "P": (T, 2 * D, 2 * D)}

    def function(self):
        from collections import OrderedDict

        from funsor.domains import Bint
        from funsor.gaussian import Gaussian
        from funsor.sum_product import sequential_sum_product

        D, T = self.D, self.T

        def kalman(w0, P0, w, P):
            init = Gaussian(
                white_vec=w0, prec_sqrt=P0, inputs=OrderedDict(x_curr=Reals[D])
            )
            inputs = OrderedDict(time=Bint[T], x_prev=Reals[D], x_curr=Reals[D])
            trans = Gaussian(white_vec=w, prec_sqrt=P, inputs=inputs)
            time = Variable("time", Bint[T])
            chain = sequential_sum_product(
                ops.logaddexp, ops.add, trans, time, {"x_prev": "x_curr"}
            )
            return (init(x_curr="x_prev") + chain).reduce(ops.logaddexp).data

        return kalman

    def hand(self, lib):
        """An information-form forward filter (Schur complements)."""
        D, T = self.D, self.T
        log_2pi = LOG_2PI

        def kalman(w0, P0, w, P):
            prec, info, const = P0 @ P0.T, P0 @ w0, -0.5 * (w0 @ w0)
            for t in range(T):
                joint = P[t] @ P[t].T
                joint_info = P[t] @ w[t]
                a = joint[:D, :D] + prec
                b = joint[:D, D:]
                i1 = joint_info[:D] + info
                solve_b = lib.solve(a, b)
                solve_i = lib.solve(a, i1[:, None])[:, 0]
                const = const - 0.5 * (w[t] @ w[t]) + 0.5 * (i1 @ solve_i)
                const = const + 0.5 * D * log_2pi - 0.5 * lib.logdet(a)
                prec = joint[D:, D:] - b.T @ solve_b
                info = joint_info[D:] - b.T @ solve_i
            solve_i = lib.solve(prec, info[:, None])[:, 0]
            return (
                const
                + 0.5 * (info @ solve_i)
                + 0.5 * D * log_2pi
                - 0.5 * lib.logdet(prec)
            )

        return kalman

    def _blocks(self, lib, w0, P0, w, P):
        """The information form of every step at once (batched): blocks of
        each joint precision, information vector halves, and the constant
        part of the log normalizer that does not depend on the filter."""
        D, T = self.D, self.T
        joint = P @ lib.swapaxes(P, 1, 2)
        joint_info = (P @ w[:, :, None])[:, :, 0]
        const = -0.5 * ((w * w).sum() + w0 @ w0) + 0.5 * (T + 1) * D * LOG_2PI
        blocks = (
            joint[:, :D, :D],
            joint[:, :D, D:],
            joint[:, D:, D:],
            joint_info[:, :D],
            joint_info[:, D:],
        )
        return blocks, P0 @ P0.T, P0 @ w0, const

    def hand_fast(self, lib):
        """An information-form filter: every step's blocks computed at once,
        then per step one factorization (solve and log-determinant of the
        same matrix) and one matmul for both Schur complements."""
        D = self.D
        cat, solve_logdet = lib.cat, lib.solve_and_logdet

        def kalman(w0, P0, w, P):
            blocks, prec, info, const = self._blocks(lib, w0, P0, w, P)
            for a0, b, c, i0, i1 in zip(*blocks):
                a, i = a0 + prec, i0 + info
                solution, logdet = solve_logdet(a, cat([b, i[:, None]], 1))
                b_t_solution = b.T @ solution
                const = const + 0.5 * (i @ solution[:, D]) - 0.5 * logdet
                prec = c - b_t_solution[:, :D]
                info = i1 - b_t_solution[:, D]
            solution, logdet = solve_logdet(prec, info[:, None])
            return const + 0.5 * (info @ solution[:, 0]) - 0.5 * logdet

        return kalman

    def hand_scan(self):
        import jax
        import jax.numpy as jnp

        from benchmarks.cases import array_lib

        lib, D = array_lib("jax"), self.D

        def step(carry, blocks):
            prec, info, const = carry
            a0, b, c, i0, i1 = blocks
            a, i = a0 + prec, i0 + info
            solution, logdet = lib.solve_and_logdet(
                a, jnp.concatenate([b, i[:, None]], 1)
            )
            b_t_solution = b.T @ solution
            const = const + 0.5 * (i @ solution[:, D]) - 0.5 * logdet
            return (c - b_t_solution[:, :D], i1 - b_t_solution[:, D], const), None

        def kalman(w0, P0, w, P):
            blocks, prec, info, const = self._blocks(lib, w0, P0, w, P)
            carry, _ = jax.lax.scan(step, (prec, info, const), blocks)
            prec, info, const = carry
            solution, logdet = lib.solve_and_logdet(prec, info[:, None])
            return const + 0.5 * (info @ solution[:, 0]) - 0.5 * logdet

        return kalman


class FFBS(TracedCase):
    """``funsor.recipes.forward_filter_backward_rsample`` on a Gaussian
    chain of ``n`` variables over ``Reals[2]``, 4 particles."""

    keyed = True  # on jax, draws take an rng_key input

    def __init__(self, n=5):
        self.n = n
        self.name = f"ffbs_{n}"

    def shapes(self):
        shapes = {"w0": (2,), "P0": (2, 2)}
        for k in range(1, self.n):
            shapes[f"w{k}"], shapes[f"P{k}"] = (4,), (4, 4)
        return shapes

    def function(self):
        from collections import OrderedDict

        from funsor.domains import Bint
        from funsor.gaussian import Gaussian
        from funsor.recipes import forward_filter_backward_rsample

        n = self.n

        def ffbs(rng_key=None, **arrays):
            factors = {
                "x0": Gaussian(
                    white_vec=arrays["w0"],
                    prec_sqrt=arrays["P0"],
                    inputs=OrderedDict(x0=Reals[2]),
                )
            }
            for k in range(1, n):
                inputs = OrderedDict([(f"x{k - 1}", Reals[2]), (f"x{k}", Reals[2])])
                factors[f"x{k}"] = Gaussian(
                    white_vec=arrays[f"w{k}"], prec_sqrt=arrays[f"P{k}"], inputs=inputs
                )
            samples, log_prob = forward_filter_backward_rsample(
                factors,
                frozenset(factors),
                frozenset(),
                {"particle": Bint[4]},
                rng_key=rng_key,
            )
            return {k: v.data for k, v in samples.items()}, log_prob.data

        return ffbs

    def hand(self, lib):
        """The same posterior sampled densely: the chain's joint precision
        and information vector, its Cholesky factor ``L``, draws
        ``mean + L⁻ᵀ z`` and their log density
        ``-|z|²/2 - d/2 log 2π + log|L|`` (what the recipe's log_prob is)."""
        n, d = self.n, 2 * self.n
        log_2pi = LOG_2PI

        def ffbs(rng_key=None, **arrays):
            prec, info = 0.0, 0.0
            for k in range(n):
                P, w = arrays[f"P{k}"], arrays[f"w{k}"]
                start = 0 if k == 0 else 2 * (k - 1)
                prec = prec + lib.embed(P @ P.T, start, d)
                info = info + lib.embed((P @ w)[:, None], start, d)[:, 0]
            chol = lib.cholesky(prec)
            mean = lib.solve(prec, info[:, None])[:, 0]
            z = lib.randn((4, d), rng_key)
            x = mean + lib.solve(chol.T, z.T).T
            log_det = lib.log(lib.diagonal(chol)).sum()
            log_prob = -0.5 * (z * z).sum(-1) - 0.5 * d * log_2pi + log_det
            samples = {f"x{k}": x[:, 2 * k : 2 * k + 2] for k in range(n)}
            return samples, log_prob

        return ffbs


CASES = [
    Affine(),
    Chain(50),
    HMM(10),
    HMM(100),
    EmissionHMM(100),
    SeparateHMM(10),
    SeparateHMM(100),
    Plated(),
    Tree(),
    SeparateTree(),
    Kalman(10),
    Kalman(100),
    FFBS(),
]


@functools.lru_cache
def array_lib(backend):
    """The few backend functions hand-written code uses."""
    return _LIBS[backend]()


def _embed_pads(block, start, size):
    """numpy-style pads placing ``block`` at rows and columns ``start:`` of a
    zero ``size`` x ``size`` matrix (or rows ``start:`` of ``size`` x 1)."""
    rows, cols = block.shape
    left = start if cols > 1 else 0
    right = size - cols - left if cols > 1 else 0
    return (start, size - start - rows), (left, right)


def _numpy_lib():
    import numpy as np

    class NumpyLib:
        exp, tanh, log, diagonal = np.exp, np.tanh, np.log, np.diagonal
        solve = staticmethod(np.linalg.solve)
        cholesky = staticmethod(np.linalg.cholesky)

        @staticmethod
        def embed(block, start, size):
            return np.pad(block, _embed_pads(block, start, size))

        @staticmethod
        def randn(shape, key=None):
            return np.random.standard_normal(shape)

        @staticmethod
        def logdet(x):
            return np.linalg.slogdet(x)[1]

        @staticmethod
        def logsumexp(x, axis):
            # the fastest plain-numpy logsumexp (one ufunc reduction)
            return np.logaddexp.reduce(x, axis)

        swapaxes, cat = staticmethod(np.swapaxes), staticmethod(np.concatenate)

        @staticmethod
        def solve_and_logdet(a, rhs):
            # numpy has no Cholesky solve: two LU factorizations of a small a
            return np.linalg.solve(a, rhs), np.linalg.slogdet(a)[1]

    return NumpyLib


def _torch_lib():
    import torch

    class TorchLib:
        exp, tanh = torch.exp, torch.tanh
        logsumexp = staticmethod(torch.logsumexp)
        solve = staticmethod(torch.linalg.solve)
        logdet = staticmethod(torch.logdet)
        log, diagonal = torch.log, torch.diagonal
        cholesky = staticmethod(torch.linalg.cholesky)

        @staticmethod
        def embed(block, start, size):
            (top, bottom), (left, right) = _embed_pads(block, start, size)
            return torch.nn.functional.pad(block, (left, right, top, bottom))

        @staticmethod
        def randn(shape, key=None):
            return torch.randn(shape)

        swapaxes, cat = staticmethod(torch.swapaxes), staticmethod(torch.cat)

        @staticmethod
        def solve_and_logdet(a, rhs):
            chol = torch.linalg.cholesky(a)
            logdet = 2 * torch.log(torch.diagonal(chol)).sum()
            return torch.cholesky_solve(rhs, chol), logdet

    return TorchLib


def _jax_lib():
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp

    class JaxLib:
        exp, tanh, log, diagonal = jnp.exp, jnp.tanh, jnp.log, jnp.diagonal
        solve = staticmethod(jnp.linalg.solve)
        cholesky = staticmethod(jnp.linalg.cholesky)

        @staticmethod
        def embed(block, start, size):
            return jnp.pad(block, _embed_pads(block, start, size))

        @staticmethod
        def randn(shape, key=None):
            import jax

            return jax.random.normal(key, shape)

        @staticmethod
        def logdet(x):
            return jnp.linalg.slogdet(x)[1]

        @staticmethod
        def logsumexp(x, axis):
            return logsumexp(x, axis)

        swapaxes, cat = staticmethod(jnp.swapaxes), staticmethod(jnp.concatenate)

        @staticmethod
        def solve_and_logdet(a, rhs):
            from jax.scipy.linalg import cho_solve

            chol = jnp.linalg.cholesky(a)
            logdet = 2 * jnp.log(jnp.diagonal(chol)).sum()
            return cho_solve((chol, True), rhs), logdet

    return JaxLib


_LIBS = {"numpy": _numpy_lib, "torch": _torch_lib, "jax": _jax_lib}


def random_inputs(case, seed=0):
    """Backend arrays for a case's inputs (names starting with ``P``:
    well-conditioned square-root precisions)."""
    import numpy as np

    rng = np.random.RandomState(seed)
    arrays = {}
    for k, s in case.shapes().items():
        x = rng.randn(*s)
        if isinstance(case, TracedCase) and k.startswith("P"):
            x = x + 2 * np.eye(s[-2], s[-1])
        arrays[k] = x.astype(np.float32)
    backend = funsor.get_backend()
    if backend == "torch":
        import torch

        return {k: torch.from_numpy(v) for k, v in arrays.items()}
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        arrays = {k: jnp.asarray(v) for k, v in arrays.items()}
        if getattr(case, "keyed", False):
            arrays["rng_key"] = jax.random.PRNGKey(seed)
    return arrays
