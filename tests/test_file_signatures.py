"""memstore.file_signatures: bounded, link-safe SHA-256 signatures of workspace files and dependency manifests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from memstore import file_signatures
from memstore.file_signatures import UNKNOWN, SignatureCache, dependency_signature, file_signature, inside_root


def test_a_regular_file_is_its_sha256_and_a_missing_one_none(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_bytes(b"print('hi')\n")
    assert file_signature(tmp_path, "src/app.py") == hashlib.sha256(b"print('hi')\n").hexdigest()
    assert file_signature(tmp_path, "src/gone.py") is None
    assert file_signature(tmp_path, "nowhere/gone.py") is None


@pytest.mark.parametrize("path", ["", "/etc/hostname", "../outside.py", "src/../../outside.py", "a\x00b"])
def test_paths_that_leave_the_root_are_unknown(tmp_path: Path, path: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside.py").write_text("secret")
    assert inside_root(root, path) is None
    assert file_signature(root, path) is UNKNOWN


def test_a_link_out_of_the_root_is_unknown_and_a_link_inside_is_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside.py").write_text("secret")
    (root / "inside.py").write_text("mine")
    (root / "out.py").symlink_to(tmp_path / "outside.py")
    (root / "alias.py").symlink_to(root / "inside.py")
    assert file_signature(root, "out.py") is UNKNOWN
    assert file_signature(root, "alias.py") == hashlib.sha256(b"mine").hexdigest()


def test_what_is_not_a_small_regular_file_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "pipe")  # opening must not wait for a writer
    (tmp_path / "big.bin").write_bytes(b"x" * 2048)
    monkeypatch.setattr(file_signatures, "MAX_SIGNATURE_BYTES", 1024)
    assert file_signature(tmp_path, "folder") is UNKNOWN
    assert file_signature(tmp_path, "pipe") is UNKNOWN
    assert file_signature(tmp_path, "big.bin") is UNKNOWN


def test_the_dependency_signature_follows_manifests_and_lock_files_only(tmp_path: Path) -> None:
    empty = dependency_signature(tmp_path)
    assert empty == hashlib.sha256().hexdigest()
    (tmp_path / "README.md").write_text("not a manifest")
    assert dependency_signature(tmp_path) == empty
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    with_manifest = dependency_signature(tmp_path)
    assert with_manifest != empty
    (tmp_path / "requirements-dev.txt").write_text("pytest\n")
    with_requirements = dependency_signature(tmp_path)
    assert with_requirements != with_manifest
    (tmp_path / "requirements-dev.txt").write_text("pytest==8\n")
    assert dependency_signature(tmp_path) not in (with_manifest, with_requirements)
    (tmp_path / "requirements-dev.txt").unlink()
    assert dependency_signature(tmp_path) == with_manifest


def test_a_manifest_without_a_signature_makes_the_dependency_signature_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "uv.lock").write_bytes(b"x" * 2048)
    known = dependency_signature(tmp_path)
    monkeypatch.setattr(file_signatures, "MAX_SIGNATURE_BYTES", 1024)
    assert known is not UNKNOWN and dependency_signature(tmp_path) is UNKNOWN


def test_a_manifest_name_that_is_not_a_regular_file_is_not_a_manifest(tmp_path: Path) -> None:
    empty = dependency_signature(tmp_path)
    os.mkfifo(tmp_path / "uv.lock")
    (tmp_path / "go.sum").mkdir()
    assert dependency_signature(tmp_path) == empty


def test_a_missing_root_has_the_signature_of_no_dependencies(tmp_path: Path) -> None:
    assert dependency_signature(tmp_path / "absent") == hashlib.sha256().hexdigest()


def test_the_cache_hashes_each_file_and_the_manifests_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text("a")
    calls: list[str] = []
    real_file, real_deps = file_signatures.file_signature, file_signatures.dependency_signature

    def counted_file(root: Path, path: str) -> file_signatures.Signature:
        calls.append(path)
        return real_file(root, path)

    def counted_deps(root: Path) -> file_signatures.Signature:
        calls.append("<dependencies>")
        return real_deps(root)

    monkeypatch.setattr(file_signatures, "file_signature", counted_file)
    monkeypatch.setattr(file_signatures, "dependency_signature", counted_deps)
    cache = SignatureCache(tmp_path)
    assert cache.file("a.py") == cache.file("a.py") == hashlib.sha256(b"a").hexdigest()
    assert cache.file("missing.py") is None and cache.file("missing.py") is None
    assert cache.dependencies() == cache.dependencies()
    assert calls == ["a.py", "missing.py", "<dependencies>"]
