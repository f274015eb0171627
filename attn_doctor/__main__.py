"""The `attn-doctor` entry point. `run` is dispatched here, before typer and rich are imported,
so the wrapped command starts within milliseconds; every other command goes to the typer app."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["run"]:
        from attn_doctor.wrap import main as run_command

        sys.exit(run_command(sys.argv[2:]))
    from attn_doctor.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
