"""The loaders: mirror copies, checksum checks, atomic writes, recovery, and the offline
error."""

import hashlib
import os
import urllib.error
import zipfile

import pytest

from transformer_lib import data, downloads
from transformer_lib.downloads import DataFile, DataUnavailableError, fetch

CONTENT = b"To be, or not to be: that is the question.\n"
SPEC = DataFile(
    "corpus/text.txt",
    "https://example.invalid/text.txt",
    hashlib.sha256(CONTENT).hexdigest(),
    len(CONTENT),
)


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """An empty data folder, a mirror holding SPEC, and no network (downloads fail at
    once)."""
    data_dir, mirror = tmp_path / "data", tmp_path / "mirror"
    (mirror / "corpus").mkdir(parents=True)
    (mirror / SPEC.relpath).write_bytes(CONTENT)
    monkeypatch.setenv(downloads.DATA_DIR_ENV, str(data_dir))
    monkeypatch.setenv(downloads.MIRROR_ENV, str(mirror))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network in this test")

    monkeypatch.setattr(downloads.urllib.request, "urlopen", offline)
    return data_dir, mirror


def test_copies_from_mirror_and_verifies(folders):
    data_dir, _ = folders
    path = fetch(SPEC)
    assert path == data_dir / SPEC.relpath
    assert path.read_bytes() == CONTENT
    assert [p.name for p in path.parent.iterdir()] == [
        "text.txt"
    ]  # no temporary file left behind


def test_a_link_to_nothing_is_replaced_not_written_through(folders, tmp_path):
    data_dir, _ = folders
    dest = data_dir / SPEC.relpath
    dest.parent.mkdir(parents=True)
    dest.symlink_to(tmp_path / "elsewhere" / "text.txt")
    assert fetch(SPEC).read_bytes() == CONTENT
    assert not dest.is_symlink()
    assert not (tmp_path / "elsewhere").exists()  # no folder made where it pointed


def test_a_link_to_a_damaged_file_is_replaced_and_its_target_left_alone(
    folders, tmp_path
):
    data_dir, _ = folders
    damaged = tmp_path / "shared.txt"
    damaged.write_bytes(CONTENT[:-1])
    dest = data_dir / SPEC.relpath
    dest.parent.mkdir(parents=True)
    dest.symlink_to(damaged)
    assert fetch(SPEC).read_bytes() == CONTENT
    assert not dest.is_symlink()
    assert damaged.read_bytes() == CONTENT[:-1]


def test_verified_file_is_not_fetched_again(folders):
    data_dir, mirror = folders
    fetch(SPEC)
    (
        mirror / SPEC.relpath
    ).unlink()  # neither mirror nor network now: only the local copy can serve
    assert fetch(SPEC).read_bytes() == CONTENT


def test_truncated_file_is_replaced(folders, capsys):
    data_dir, _ = folders
    path = fetch(SPEC)
    path.write_bytes(CONTENT[:-1])  # truncated by one byte
    assert fetch(SPEC).read_bytes() == CONTENT
    assert "fails its sha256 check" in capsys.readouterr().out


def test_corrupt_mirror_is_never_used_and_error_says_what_to_do(folders):
    data_dir, mirror = folders
    (mirror / SPEC.relpath).write_bytes(CONTENT.replace(b"be", b"bee"))
    with pytest.raises(DataUnavailableError) as err:
        fetch(SPEC)
    message = str(err.value)
    for needed in (
        SPEC.url,
        str(data_dir / SPEC.relpath),
        SPEC.sha256,
        downloads.MIRROR_ENV,
    ):
        assert needed in message
    assert not (data_dir / SPEC.relpath).exists()
    assert not list(
        (data_dir / "corpus").glob("*")
    )  # the bad bytes were not left on disk


def test_offline_without_mirror_names_url_path_and_checksum(folders, monkeypatch):
    data_dir, _ = folders
    monkeypatch.delenv(downloads.MIRROR_ENV)
    with pytest.raises(DataUnavailableError, match="no network in this test") as err:
        fetch(SPEC)
    assert SPEC.url in str(err.value) and SPEC.sha256 in str(err.value)


def test_download_extracts_member_from_pinned_zip(folders, tmp_path, monkeypatch):
    data_dir, _ = folders
    monkeypatch.undo()  # the real urlopen again: file:// URLs need no network
    monkeypatch.setenv(downloads.DATA_DIR_ENV, str(data_dir))
    archive = tmp_path / "pairs.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("cmn.txt", CONTENT)
    spec = DataFile(
        "pairs/cmn.txt",
        archive.as_uri(),
        SPEC.sha256,
        SPEC.size,
        archive_sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
        member="cmn.txt",
    )
    assert fetch(spec).read_bytes() == CONTENT

    wrong = DataFile(
        "pairs/other.txt",
        archive.as_uri(),
        SPEC.sha256,
        SPEC.size,
        archive_sha256="0" * 64,
        member="cmn.txt",
    )
    with pytest.raises(DataUnavailableError, match="now serves another archive"):
        fetch(wrong)


def test_real_corpora_load():
    """The pinned corpora themselves (from data/, the mirror or the network)."""
    text = data.load_tiny_shakespeare()
    assert len(text) == 1_115_394 and text.startswith("First Citizen:")
    pairs = data.load_tatoeba_pairs()
    assert len(pairs) == 32_028
    assert pairs[0] == ("Hi.", "嗨。")
    assert all(en and zh and "\u200b" not in zh for en, zh in pairs)
    test = data.load_tatoeba_test()
    assert len(test) == 8_613 and len({en for en, _ in test}) == 8_549
    assert all(en and zh and "\u200b" not in zh for en, zh in test)


def test_the_public_test_is_cut_from_its_upstream_file_by_label(
    folders, tmp_path, monkeypatch
):
    data_dir, _ = folders
    monkeypatch.undo()  # file:// URLs need no network
    monkeypatch.setenv(downloads.DATA_DIR_ENV, str(data_dir))
    upstream = (
        "eng\tcmn_Hans\tHi.\t你好。\neng\tyue_Hant\tHi.\t你好呀。\neng\tcmn_Hant\tBye."
        "\t再見。\n"
    )
    (tmp_path / "test.txt").write_text(upstream, encoding="utf-8")
    kept = "eng\tcmn_Hans\tHi.\t你好。\neng\tcmn_Hant\tBye.\t再見。\n".encode()
    spec = DataFile(
        "t/eng-cmn.tsv",
        (tmp_path / "test.txt").as_uri(),
        hashlib.sha256(kept).hexdigest(),
        len(kept),
        keep_labels=("cmn_Hans", "cmn_Hant"),
    )
    assert fetch(spec).read_bytes() == kept


@pytest.mark.skipif(
    os.name != "posix", reason="no POSIX file modes (umask, 0o644) here"
)
def test_written_file_has_a_normal_mode(folders):
    import stat

    mask = os.umask(0o022)
    try:
        path = fetch(SPEC)
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
