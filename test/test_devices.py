"""Programs on devices (issue 17.3, 17.4): ``program.to(device)`` moves the
constants; calls with inputs on that device equal the original program's;
jax programs run under ``jax.jit`` with inputs sharded over 8 host devices
give the unsharded result and keep the sharding (``examples/sharding.py``,
run as a user runs it: a fresh process)."""

import os
import subprocess
import sys
import textwrap

import funsor
import pytest
from funsor.domains import Reals
from funsor.terms import Variable

from funsor_lowering import compile_funsor

from .helpers import ROOT, assert_matches, backend_randn, run_example

BACKEND = funsor.get_backend()


def program_with_constants():
    x = Variable("x", Reals[3])
    weights = funsor.Tensor(backend_randn(3, 3))
    return compile_funsor((weights @ x).exp().sum())


def devices_of(program):
    return {str(c.device) for c in program.constants if hasattr(c, "device")}


def cpu_device():
    if BACKEND == "torch":
        import torch

        return torch.device("cpu")
    if BACKEND == "jax":
        import jax

        return jax.devices("cpu")[0]
    return "cpu"


def test_to_the_cpu_keeps_results_and_moves_constants():
    program = program_with_constants()
    assert program.constants, "the test needs a program with array constants"
    moved = program.to(cpu_device())
    x = backend_randn(3)
    assert_matches(moved(x=x), program(x=x))
    if BACKEND == "jax":
        import jax

        assert all(
            isinstance(c, jax.Array) for c in moved.constants if hasattr(c, "shape")
        )


@pytest.mark.skipif(BACKEND != "numpy", reason="numpy arrays live on the CPU")
def test_numpy_programs_name_the_only_device_they_have():
    with pytest.raises(ValueError, match=r"to\('cuda'\): numpy arrays live on the CPU"):
        program_with_constants().to("cuda")


@pytest.mark.skipif(BACKEND != "torch", reason="torch devices")
def test_torch_program_on_cuda_where_present():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    program = program_with_constants()
    moved = program.to("cuda")
    assert devices_of(moved) == {"cuda:0"}
    x = backend_randn(3)
    assert_matches(moved(x=x.cuda()).cpu(), program(x=x))
    with pytest.raises(RuntimeError, match="device"):
        moved(x=x)  # inputs on the CPU, constants on CUDA


def run_jax_script(source, devices):
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["FUNSOR_BACKEND"] = "jax"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )


@pytest.mark.skipif(BACKEND != "torch", reason="torch devices")
@pytest.mark.parametrize("jit", [False, True], ids=["call", "jit"])
def test_inputs_on_another_device_raise_errors_naming_them(jit):
    import torch

    x, y = Variable("x", Reals[3]), Variable("y", Reals[3])
    plain = compile_funsor((x * y).sum())
    weighted = compile_funsor(((x * y) @ funsor.Tensor(torch.ones(3, 3))).sum())
    cpu, meta = torch.ones(3), torch.ones(3, device="meta")
    cases = [
        (plain, cpu, meta, "input 'y': on device meta, but 'x' on cpu"),
        (weighted, meta, meta, "input 'x': on device meta, but the program's"),
    ]
    for program, x_value, y_value, message in cases:
        run = program.jit("trace") if jit else program
        with pytest.raises(ValueError, match=message):
            run(x=x_value, y=y_value)
    # also once inputs of these types, dtypes and shapes have run: a call's
    # signature holds no device, and where torch's op raises on the mix, the
    # error still names the input (torch lets some ops mix meta and cpu)
    run = plain.jit("trace") if jit else plain
    assert run(x=cpu, y=cpu).device.type == "cpu"
    with pytest.raises(ValueError, match="input 'y': on device meta, but 'x' on cpu"):
        run(x=cpu, y=meta)
    # a 0-d CPU tensor beside others, as torch allows, and one device
    assert plain(x=meta, y=meta).device.type == "meta"
    scalar = compile_funsor((x * Variable("s", Reals[()])).sum())
    assert scalar(x=meta, s=torch.tensor(2.0)).device.type == "meta"


@pytest.mark.skipif(BACKEND != "jax", reason="jax devices")
def test_jax_program_moved_to_another_device_runs_there():
    result = run_jax_script(
        """
        import funsor
        funsor.set_backend("jax")
        import jax, numpy as np
        from funsor.domains import Reals
        from funsor.terms import Variable
        from funsor_lowering import compile_funsor

        x = Variable("x", Reals[3])
        weights = funsor.Tensor(np.arange(9.0, dtype=np.float32).reshape(3, 3) / 9)
        program = compile_funsor((weights @ x).exp().sum())
        second = jax.devices()[1]
        moved = program.to(second)
        arrays = [c for c in moved.constants if hasattr(c, "shape")]
        assert arrays and all(c.devices() == {second} for c in arrays)
        data = np.ones(3, np.float32)
        out = moved(x=jax.device_put(data, second))
        assert out.devices() == {second}, out.devices()
        np.testing.assert_allclose(out, program(x=data), rtol=1e-6)
        # not moved: its numpy constants follow the inputs to their device
        here = program(x=jax.device_put(data, second))
        assert here.devices() == {second}, here.devices()
        np.testing.assert_allclose(here, program(x=data), rtol=1e-6)
        print("ok")
        """,
        devices=2,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


@pytest.mark.skipif(BACKEND != "jax", reason="jax sharding")
def test_sharding_example_runs_as_a_script_on_8_host_devices():
    flags = "--xla_force_host_platform_device_count=8"
    result = run_example("sharding.py", env={"XLA_FLAGS": flags})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "64 particles on 8 devices: P('particles',)" in result.stdout
