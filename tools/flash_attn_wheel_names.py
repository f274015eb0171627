"""How each flash-attn release names its prebuilt wheels, read from its own setup.py.

`pip install flash-attn` runs setup.py's get_wheel_url(): it downloads
``flash_attn-{version}+cu{CUDA}torch{major.minor}cxx11abi{TRUE|FALSE}-cp{py}-cp{py}-{platform}.whl``
from the release's GitHub assets. The CUDA part changed across tags: ``{major}{minor}`` of the
installed torch's CUDA (v2.1-v2.2), of a CUDA the tag forces per major (12.2 from v2.3, 11.8 and 12.3
by v2.6.3), and only ``{major}`` from v2.7.0. This records, per v2.* tag, which of these and the
versions forced, so a planner can compute the exact asset name without running setup.py.

    python -m tools.flash_attn_wheel_names --git PATH   # a flash-attention git dir (the `fetch` tool)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from packaging.version import Version

OUT = Path(__file__).resolve().parents[1] / "attn_doctor/releases/snapshot/flash-attn-wheel-names.json"
_CODE_LINE = re.compile(
    r"^(?!\s*#)\s*cuda_version = f\"\{torch_cuda_version\.major\}(\{torch_cuda_version\.minor\})?\"", re.M
)
# `torch_cuda_version = parse("11.8") if torch_cuda_version.major == 11 else parse("12.3")`, or one
# version per branch of an if/elif chain (v2.3's 12.2 only, v2.8.3.post1's 11.8/12.3/13.0)
_FORCED = re.compile(
    r"^(?!\s*#)[^\n]*torch_cuda_version = parse\(\"([0-9]+\.[0-9]+)\"\)"
    r"(?: if [^\n]*else parse\(\"([0-9]+\.[0-9]+)\"\))?",
    re.M,
)
_URL = re.compile(r"BASE_WHEEL_URL = \(?\s*\"([^\"]+)\"")
_TAG = re.compile(r"^v(2\.[0-9]+\.[0-9]+(?:\.post[0-9]+)?)$")


def scheme(setup_py: str) -> dict[str, Any] | None:
    """The wheel-name scheme of one tag's setup.py, or None where it downloads no wheel."""
    code, url = _CODE_LINE.search(setup_py), _URL.search(setup_py)
    if code is None or url is None:
        return None
    forced: dict[str, str] = {}
    for found in _FORCED.finditer(setup_py):
        for version in filter(None, found.groups()):
            forced.setdefault(version.split(".")[0], version)
    return {"cuda": "major_minor" if code[1] else "major", "cuda_forced": forced, "url": url[1]}


def collect(git_dir: Path) -> dict[str, Any]:
    tags = subprocess.run(
        ["git", "--git-dir", str(git_dir), "tag"], capture_output=True, text=True, check=True
    ).stdout.split()
    releases: dict[str, Any] = {}
    for tag in sorted(tags):
        version = _TAG.match(tag)
        if version is None:
            continue
        shown = subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{tag}:setup.py"], capture_output=True, text=True
        )
        found = scheme(shown.stdout) if shown.returncode == 0 else None
        if found is not None:
            releases[version[1]] = {"tag": tag, **found}
    return {
        "source": "setup.py get_wheel_url() at each v2.* tag of Dao-AILab/flash-attention "
        "(python -m tools.flash_attn_wheel_names)",
        "releases": dict(sorted(releases.items(), key=lambda item: Version(item[0]))),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", type=Path, required=True, help="a flash-attention git directory")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    document = collect(args.git)
    args.out.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    print(f"{len(document['releases'])} releases: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
