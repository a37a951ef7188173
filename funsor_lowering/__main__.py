"""Command line: ``python -m funsor_lowering demo [--backend B]``, and
``python -m funsor_lowering conformance [--backend B ...] [--write PATH]
[--check]`` (funsor's own test suite compiled: see
:mod:`funsor_lowering.conformance.runner`)."""

import argparse


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m funsor_lowering")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="compile, show and time an example")
    demo.add_argument("--backend", choices=["numpy", "torch", "jax"], default="numpy")
    commands.add_parser(
        "conformance",
        help="run funsor's own test suite compiled (see --help)",
        add_help=False,
    )
    args, rest = parser.parse_known_args(argv)
    if args.command == "conformance":
        from .conformance.runner import main as run_conformance

        return run_conformance(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "demo":
        from .cli.demo import main as run_demo

        return run_demo(args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
