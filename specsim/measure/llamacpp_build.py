"""Build llama.cpp's measuring tools from one pinned registry source.

The source is the PyPI sdist of ``llama-cpp-python`` (:data:`SDIST_VERSION`),
which vendors llama.cpp under ``vendor/llama.cpp``; nothing else is
downloaded. :func:`build_llamacpp`

1. fetches the sdist with ``pip download --no-deps --no-binary :all:`` (or
   takes a copy already there) and checks its sha256 (:data:`SDIST_SHA256`),
2. unpacks it under ``<root>/src`` (``root`` is ``.venv/llama.cpp`` by default),
3. reads the vendored llama.cpp commit from the sdist's git metadata
   (``.git/modules/vendor/llama.cpp/HEAD``),
4. configures with :data:`CMAKE_FLAGS` (portable: ``GGML_NATIVE=OFF``, no
   curl, no OpenSSL) and builds :data:`TARGETS` with ``-j2``,
5. writes ``<root>/build-info.json`` (version, commit, sdist sha256, flags,
   compilers, seconds); a later call whose info matches and whose binaries
   exist builds nothing.

Run it with ``make llama-cpp`` or ``python -m specsim.measure.llamacpp_build``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "SDIST_VERSION",
    "SDIST_SHA256",
    "CMAKE_FLAGS",
    "TARGETS",
    "DEFAULT_ROOT",
    "LlamaCppMissing",
    "check_toolchain",
    "vendored_commit",
    "build_llamacpp",
    "load_build_info",
    "tool_path",
]

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
"""The sha256 of that sdist as the registry served it when this was pinned."""
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)
TARGETS: tuple[str, ...] = ("llama-bench", "llama-speculative-simple")
DEFAULT_ROOT = Path(".venv") / "llama.cpp"
Log = Callable[[str], None]


class LlamaCppMissing(RuntimeError):
    """The toolchain, the source or a built tool is not there; the message says which."""


def check_toolchain() -> dict[str, str]:
    """The path of cmake, a C and a C++ compiler; :class:`LlamaCppMissing` naming what is absent."""
    found: dict[str, str] = {}
    wanted = {
        "cmake": ("cmake",),
        "c": (os.environ.get("CC", ""), "cc", "gcc", "clang"),
        "c++": (os.environ.get("CXX", ""), "c++", "g++", "clang++"),
    }
    missing = []
    for role, names in wanted.items():
        hit = next((shutil.which(n) for n in names if n and shutil.which(n)), None)
        if hit is None:
            missing.append(f"{role} ({' or '.join(n for n in names if n)})")
        else:
            found[role] = hit
    if missing:
        raise LlamaCppMissing(
            "building llama.cpp needs " + ", ".join(missing) + " on PATH: install them "
            "(Debian: apt-get install cmake build-essential) and rerun `make llama-cpp`"
        )
    return found


def _version_line(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    lines = (out.stdout or out.stderr).splitlines()
    return lines[0].strip() if lines else "unknown"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(root: Path, sdist: Path | None, log: Log) -> Path:
    """The sdist under ``<root>/dist``: copied from ``sdist`` or fetched by pip."""
    dist = root / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    target = dist / SDIST_FILE
    if target.is_file():
        return target
    if sdist is not None:
        if not tarfile.is_tarfile(sdist):
            raise LlamaCppMissing(f"{sdist}: not a tar archive (expected {SDIST_FILE})")
        shutil.copyfile(sdist, target)
        return target
    log(f"downloading {SDIST_NAME}=={SDIST_VERSION} (sdist only) into {dist}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    cmd += [f"{SDIST_NAME}=={SDIST_VERSION}", "-d", str(dist)]
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0 or not target.is_file():
        raise LlamaCppMissing(f"pip could not download {SDIST_NAME}=={SDIST_VERSION}")
    return target


def unpack(sdist: Path, root: Path) -> Path:
    """Unpack ``sdist`` under ``<root>/src`` once; return the package folder."""
    src = root / "src"
    top = src / f"llama_cpp_python-{SDIST_VERSION}"
    if (top / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
        return top
    src.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(src, filter="data")
    if not (top / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
        raise LlamaCppMissing(f"{sdist}: no vendor/llama.cpp/CMakeLists.txt inside")
    return top


def vendored_commit(package_dir: Path) -> str:
    """The llama.cpp commit the sdist vendors (its submodule's ``HEAD``), 40 hex digits."""
    head = package_dir / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD"
    if not head.is_file():
        raise LlamaCppMissing(f"{head}: missing, cannot tell the vendored llama.cpp commit")
    text = head.read_text(encoding="utf-8").strip()
    if len(text) != 40 or any(c not in "0123456789abcdef" for c in text):
        raise LlamaCppMissing(f"{head}: not a commit hash ({text[:60]!r})")
    return text


def tool_path(name: str, root: str | os.PathLike[str] = DEFAULT_ROOT) -> Path:
    """Where the built tool ``name`` lies (it may not exist)."""
    return Path(root) / "build" / "bin" / name


def load_build_info(root: str | os.PathLike[str] = DEFAULT_ROOT) -> dict[str, Any]:
    """The build's record; :class:`LlamaCppMissing` when llama.cpp was not built."""
    path = Path(root) / "build-info.json"
    if not path.is_file():
        raise LlamaCppMissing(f"{path}: llama.cpp is not built (run `make llama-cpp`)")
    info: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return info


def _is_current(root: Path, flags: Sequence[str], targets: Sequence[str]) -> bool:
    try:
        info = load_build_info(root)
    except LlamaCppMissing:
        return False
    same = info.get("version") == SDIST_VERSION and info.get("cmake_flags") == list(flags)
    return same and all(tool_path(t, root).is_file() for t in targets)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def build_llamacpp(
    root: str | os.PathLike[str] = DEFAULT_ROOT,
    *,
    sdist: str | os.PathLike[str] | None = None,
    targets: Sequence[str] = TARGETS,
    jobs: int = 2,
    log: Log | None = None,
) -> dict[str, Any]:
    """Fetch, unpack, configure and build; return the build record (see the module)."""
    say = log if log is not None else _say
    base = Path(root)
    tools = check_toolchain()
    flags = list(CMAKE_FLAGS)
    if _is_current(base, flags, targets):
        say(f"llama.cpp already built under {base} (build-info.json matches)")
        return load_build_info(base)
    archive = fetch_sdist(base, Path(sdist) if sdist else None, say)
    digest = _sha256(archive)
    if digest != SDIST_SHA256:
        raise LlamaCppMissing(
            f"{archive}: sha256 {digest[:12]}... is not the pinned {SDIST_NAME} "
            f"{SDIST_VERSION} sdist ({SDIST_SHA256[:12]}...); remove it and rerun"
        )
    package = unpack(archive, base)
    commit = vendored_commit(package)
    source = package / "vendor" / "llama.cpp"
    build = base / "build"
    started = time.monotonic()
    configure = ["cmake", "-S", str(source), "-B", str(build), *flags]
    configure += [f"-DLLAMA_BUILD_COMMIT={commit[:7]}"]
    say(" ".join(configure))
    subprocess.run(configure, check=True)
    compile_cmd = ["cmake", "--build", str(build), f"-j{jobs}", "--target", *targets]
    say(" ".join(compile_cmd))
    subprocess.run(compile_cmd, check=True)
    info = {
        "package": SDIST_NAME,
        "version": SDIST_VERSION,
        "sdist_sha256": digest,
        "llama_cpp_commit": commit,
        "cmake_flags": flags,
        "targets": list(targets),
        "jobs": jobs,
        "compilers": {role: _version_line(exe) for role, exe in tools.items()},
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (base / "build-info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    say(f"built {', '.join(targets)} in {info['build_seconds']} s under {build}")
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(DEFAULT_ROOT), help="where to unpack and build")
    parser.add_argument("--sdist", default=None, help="use this sdist instead of downloading")
    parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    parser.add_argument("--target", nargs="+", default=list(TARGETS), help="cmake targets")
    args = parser.parse_args(argv)
    try:
        build_llamacpp(args.root, sdist=args.sdist, targets=args.target, jobs=args.jobs)
    except LlamaCppMissing as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except subprocess.CalledProcessError as exc:
        sys.stderr.write(f"error: {' '.join(map(str, exc.cmd))} exited {exc.returncode}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
