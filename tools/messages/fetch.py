"""Fill the release cache for the message catalogue (a maintainer step; needs the registry).

python -m tools.messages.fetch --cache /tmp/message-trees [--packages transformers ...]
python -m tools.messages.build --cache /tmp/message-trees
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tools.messages.sources import SOURCES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--packages", nargs="*", help="only these distributions")
    args = parser.parse_args(argv)
    for source in SOURCES:
        if not args.packages or source.distribution in args.packages:
            source.fetch(args.cache)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
