"""Command line: ``python -m funsor_lowering demo [--backend B]``."""

import argparse


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m funsor_lowering")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="compile, show and time an example")
    demo.add_argument("--backend", choices=["numpy", "torch", "jax"], default="numpy")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import main as run_demo

        return run_demo(args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
