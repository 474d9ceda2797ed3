"""The llama.cpp build: a clear error without a toolchain, the vendored commit read from the
sdist's git metadata, and the record of a finished build (skipped when it is not built)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs the optional extra specsim[measure]")

from specsim.measure import llamacpp_build as lb  # noqa: E402

ROOT = Path(__file__).resolve().parents[2] / lb.DEFAULT_ROOT


def test_a_missing_toolchain_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(lb.LlamaCppMissing, match=r"needs cmake \(cmake\), c \(cc or gcc"):
        lb.check_toolchain()
    assert lb.main(["--root", "/nonexistent/llama.cpp"]) == 2


def test_the_vendored_commit_is_read_from_the_submodule_head(tmp_path: Path) -> None:
    head = tmp_path / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD"
    head.parent.mkdir(parents=True)
    head.write_text("0c1e57098bba43ac29e6e3b677cdceebdd22334f\n")
    assert lb.vendored_commit(tmp_path) == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    head.write_text("ref: refs/heads/master\n")
    with pytest.raises(lb.LlamaCppMissing, match="HEAD: not a commit hash"):
        lb.vendored_commit(tmp_path)


def test_a_file_that_is_not_the_sdist_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "llama.tar.gz"
    bad.write_text("not a tar")
    with pytest.raises(lb.LlamaCppMissing, match=r"llama\.tar\.gz: not a tar archive"):
        lb.fetch_sdist(tmp_path / "root", bad, lambda line: None)


def test_no_build_is_reported_with_the_command_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(lb.LlamaCppMissing, match="make llama-cpp"):
        lb.load_build_info(tmp_path)


@pytest.mark.skipif(
    not (ROOT / "build-info.json").is_file(), reason="llama.cpp not built (make llama-cpp)"
)
def test_the_build_records_the_pinned_version_and_commit() -> None:
    info = json.loads((ROOT / "build-info.json").read_text())
    assert info["version"] == lb.SDIST_VERSION and len(info["llama_cpp_commit"]) == 40
    assert "-DGGML_NATIVE=OFF" in info["cmake_flags"]
    for tool in lb.TARGETS:
        assert lb.tool_path(tool, ROOT).is_file()


def test_an_sdist_that_is_not_the_pinned_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "fake.tar.gz"
    with tarfile.open(fake, "w:gz") as tar:
        tar.addfile(tarfile.TarInfo("empty"), io.BytesIO(b""))
    monkeypatch.setattr(lb, "check_toolchain", lambda: {})
    with pytest.raises(lb.LlamaCppMissing, match=r"is not the pinned llama-cpp-python 0\.3\.36"):
        lb.build_llamacpp(tmp_path / "root", sdist=fake, log=lambda line: None)
