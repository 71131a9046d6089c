"""Does every dependency of pyproject.toml resolve to a wheel a GB10 host (aarch64, glibc 2.39, CUDA 13)
can install? pip's own resolver answers, for a Linux aarch64 CPython 3.12, with binaries only.

    PYTHONPATH=. python3 benchmarks/check_aarch64_resolve.py [--torch torch==2.13.0] [--python 3.12]

`pip install --dry-run --report` resolves the whole tree (torch's CUDA packages included) for the
platform tags `manylinux_2_17` ... `manylinux_2_39` `_aarch64` (DGX OS is Ubuntu 24.04: glibc 2.39;
pip does not widen one manylinux tag to the older ones itself, and NVIDIA's CUDA wheels carry
`manylinux_2_27`). `--use-feature=fast-deps` reads each wheel's metadata by range requests instead
of downloading torch and its CUDA wheels (some GB); pip falls back to downloading where an index
cannot. Prints one line per package (version, wheel) and a verdict; exit 0 when every package is
a wheel for aarch64 or for any platform, 1 when pip cannot resolve or a package is not such a wheel.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PLATFORMS = [f"manylinux_2_{minor}_aarch64" for minor in range(39, 16, -1)] + ["manylinux2014_aarch64"]


def dependencies(torch_spec: str | None) -> list[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    if torch_spec:  # the README's pinned wheel instead of pyproject's loose `torch>=2.4`
        deps = [torch_spec if d.replace(" ", "").startswith("torch>") or d == "torch" else d for d in deps]
    return deps


def resolve(deps: list[str], python: str) -> tuple[list[dict], str]:
    """(the packages pip would install, "") or ([], pip's last lines) when it cannot resolve."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        cmd += ["--only-binary=:all:", "--implementation", "cp", "--python-version", python]
        cmd += ["--target", str(Path(tmp) / "nowhere"), "--report", str(report), "--use-feature=fast-deps"]
        cmd += [arg for p in PLATFORMS for arg in ("--platform", p)] + deps
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not report.exists():
            lines = [x for x in (proc.stderr + proc.stdout).splitlines() if "is ignored" not in x]
            return [], "\n".join(lines[-8:])
        return json.loads(report.read_text())["install"], ""


def wheel_ok(filename: str) -> bool:
    """A wheel for Linux aarch64 or for any platform; never an sdist, never another platform's wheel."""
    if not filename.endswith(".whl"):
        return False
    platform = filename[:-4].split("-")[-1]
    return platform == "any" or all(p.startswith("manylinux") and p.endswith("_aarch64") for p in platform.split("."))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", default="torch==2.13.0", help="torch requirement to resolve ('' keeps pyproject's)")
    parser.add_argument("--python", default="3.12", help="target CPython version")
    args = parser.parse_args()
    deps = dependencies(args.torch or None)
    packages, error = resolve(deps, args.python)
    if error:
        print(f"pip cannot resolve {len(deps)} dependencies for aarch64 CPython {args.python}:\n{error}")
        return 1
    bad = []
    for item in sorted(packages, key=lambda i: i["metadata"]["name"].lower()):
        filename = item["download_info"]["url"].rsplit("/", 1)[-1]
        ok = wheel_ok(filename)
        bad += [] if ok else [filename]
        print(f"{'ok ' if ok else 'BAD'} {item['metadata']['name']:32} {item['metadata']['version']:14} {filename}")
    print(
        f"{len(packages)} packages for {len(deps)} dependencies (pyproject, {args.torch or 'torch as pyproject says'}) "
        f"on manylinux aarch64, CPython {args.python}: "
        + ("every one a wheel" if not bad else f"{len(bad)} not an aarch64 or pure wheel: {', '.join(bad)}")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
