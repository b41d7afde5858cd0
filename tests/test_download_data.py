"""scripts/verify_data.py against the pinned manifest, and scripts/download_data.sh offline.

The hub itself cannot be reached here, so the download script runs against a stand-in ``curl`` that
serves local files and canned response headers: that covers everything the script does with what it
downloads (hash check, .part handling, extraction, skipping, verification), not the network transfer.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from .conftest import REPO, SENTEVAL, WIKI_HEAD

VERIFY = os.path.join(REPO, "scripts", "verify_data.py")
DOWNLOAD = os.path.join(REPO, "scripts", "download_data.sh")
MANIFEST = os.path.join(REPO, "scripts", "data_checksums.txt")
CORPUS = "wiki1m_for_simcse.txt"
CORPUS_LINES = 1_000_000
GOLD = "senteval/STS/STS16-en-test/STS.gs.headlines.txt"


def verify(data_dir, *options):
    return subprocess.run([sys.executable, VERIFY, str(data_dir), *options], capture_output=True, text=True)


def pinned_sha256(path):
    with open(MANIFEST) as f:
        return next(line.split()[0] for line in f if line.rstrip("\n").endswith(f"  {path}"))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def full_corpus(head: bytes) -> bytes:
    """``head`` completed to the corpus' line count with cheap filler lines."""
    # The shared head stops mid-line with no newline: close that line, then add the rest.
    lines = head.count(b"\n") + 1
    return head + b"\n" + b"x\n" * (CORPUS_LINES - lines)


@pytest.fixture(scope="module")
def head() -> bytes:
    with open(WIKI_HEAD, "rb") as f:
        return f.read()


@pytest.fixture()
def senteval_copy(tmp_path):
    shutil.copytree(SENTEVAL, tmp_path / "senteval")
    return tmp_path


# -- verify_data.py: SentEval ----------------------------------------------------------------------


def test_shared_senteval_passes(tmp_path):
    (tmp_path / "senteval").symlink_to(SENTEVAL)
    result = verify(tmp_path, "--skip-corpus")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK: 69 file(s)")


def test_altered_gold_file_named(senteval_copy):
    gold = senteval_copy / GOLD
    data = bytearray(gold.read_bytes())
    data[0] = ord("1") if data[0] != ord("1") else ord("2")
    gold.write_bytes(bytes(data))
    result = verify(senteval_copy, "--skip-corpus")
    assert result.returncode == 1
    problems = result.stderr.splitlines()[:-1]
    assert problems == [f"{GOLD}: sha256: expected {pinned_sha256(GOLD)}, found {sha256(gold)}"]


def test_removed_file_named(senteval_copy):
    (senteval_copy / "senteval/SICK/SICK_trial.txt").unlink()
    result = verify(senteval_copy, "--skip-corpus")
    assert result.returncode == 1
    assert result.stderr.startswith("senteval/SICK/SICK_trial.txt: missing")


def test_missing_senteval_dir_is_one_problem(tmp_path):
    result = verify(tmp_path, "--skip-corpus")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0].startswith("senteval/: missing directory")
    assert len(result.stderr.splitlines()) == 2


# -- verify_data.py: corpus ------------------------------------------------------------------------


def test_head_completed_to_a_million_lines_passes(tmp_path, head):
    (tmp_path / CORPUS).write_bytes(full_corpus(head))
    result = verify(tmp_path, "--skip-senteval")
    assert result.returncode == 0, result.stderr


def test_head_alone_fails_line_count(tmp_path, head):
    (tmp_path / CORPUS).write_bytes(head)
    result = verify(tmp_path, "--skip-senteval")
    assert result.returncode == 1
    assert result.stderr.splitlines()[:-1] == [f"{CORPUS}: line count: expected {CORPUS_LINES}, found 11915"]


def test_changed_character_fails_hash(tmp_path, head):
    changed = bytearray(head)
    changed[5] = ord("#")
    (tmp_path / CORPUS).write_bytes(full_corpus(bytes(changed)))
    result = verify(tmp_path, "--skip-senteval")
    assert result.returncode == 1
    problems = result.stderr.splitlines()[:-1]
    assert len(problems) == 1
    assert problems[0].startswith(f"{CORPUS}: sha256 of the first {len(head)} bytes: expected {sha256(WIKI_HEAD)}")


def test_missing_corpus_named(tmp_path):
    result = verify(tmp_path, "--skip-senteval")
    assert result.returncode == 1
    assert result.stderr.startswith(f"{CORPUS}: missing")


# -- download_data.sh ------------------------------------------------------------------------------


def test_script_syntax():
    subprocess.run(["bash", "-n", DOWNLOAD], check=True)


def call_function(function, *args, stdin=""):
    """Run one function of download_data.sh; sourcing it defines them without running main."""
    return subprocess.run(
        ["bash", "-c", f'source "$0" && {function} "$@"', DOWNLOAD, *args], input=stdin, capture_output=True, text=True
    )


def make_tar(path, files: dict[str, bytes]):
    staging = path.parent / (path.name + ".d")
    for name, data in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_bytes(data)
    with tarfile.open(path, "w") as tar:
        for top in sorted(os.listdir(staging)):
            tar.add(staging / top, arcname=top)
    return path


FIXTURE_TREE = {
    "STS/STSBenchmark/sts-dev.csv": b"dev\n",
    "STS/STS12-en-test/STS.gs.MSRpar.txt": b"4.0\n",
    "SICK/SICK_trial.txt": b"header\n",
}


@pytest.mark.parametrize("top", ["", "downstream/"])
def test_install_senteval_locates_data_dir(tmp_path, top):
    tar = make_tar(tmp_path / "senteval.tar", {top + name: data for name, data in FIXTURE_TREE.items()})
    dest = tmp_path / "data"
    dest.mkdir()
    result = call_function("install_senteval", str(tar), str(dest / "senteval"))
    assert result.returncode == 0, result.stderr
    for name, data in FIXTURE_TREE.items():
        assert (dest / "senteval" / name).read_bytes() == data
    assert os.listdir(dest) == ["senteval"]  # the scratch directory is gone


def test_install_senteval_rejects_tar_without_stsb(tmp_path):
    tar = make_tar(tmp_path / "senteval.tar", {"downstream/SICK/SICK_trial.txt": b"header\n"})
    dest = tmp_path / "data"
    dest.mkdir()
    result = call_function("install_senteval", str(tar), str(dest / "senteval"))
    assert result.returncode == 1
    assert "expected exactly one STS/STSBenchmark directory" in result.stderr
    assert os.listdir(dest) == []


SHA = "ab" * 32
OTHER = "cd" * 32


@pytest.mark.parametrize(
    "headers, expected",
    [
        # The hub's redirect, then the storage backend whose etag is some other 64-hex value.
        (
            f'HTTP/2 302\r\nx-linked-size: 5\r\nX-Linked-ETag: "{SHA}"\r\netag: "{OTHER}"\r\n\r\n'
            f'HTTP/2 200\r\nETag: "{OTHER}"\r\n\r\n',
            SHA,
        ),
        (f'HTTP/2 200\r\netag: "{SHA}"\r\n\r\n', SHA),
        # A git blob's sha1 or a weak etag is no sha256.
        ('HTTP/2 200\r\netag: "0123456789abcdef0123456789abcdef01234567"\r\n\r\n', ""),
        (f'HTTP/2 200\r\netag: W/"{SHA}"\r\n\r\n', ""),
        ("", ""),
    ],
)
def test_hub_sha256_from_headers(headers, expected):
    result = call_function("hub_sha256_from_headers", stdin=headers)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


FAKE_CURL = r"""#!/usr/bin/env bash
# Stands in for curl: logs its arguments, serves $FAKE_HUB/<name> and $FAKE_HEADERS/<name>.headers.
echo "$*" >> "$FAKE_HUB/calls.log"
url=${@: -1}
name=${url##*/}
case "$1" in
    -sIL) cat "$FAKE_HEADERS/$name.headers" 2>/dev/null || true ;;
    -fL) while [[ $1 != -o ]]; do shift; done; cp "$FAKE_HUB/$name" "$2" ;;
    *) exit 2 ;;
esac
"""


@pytest.fixture(scope="module")
def fake_hub(tmp_path_factory, head):
    """The two hub files (the corpus made up from the head, the real SentEval tree under downstream/)
    and a curl that serves them."""
    hub = tmp_path_factory.mktemp("hub")
    (hub / CORPUS).write_bytes(full_corpus(head))
    with tarfile.open(hub / "senteval.tar", "w") as tar:
        tar.add(SENTEVAL, arcname="downstream")
    bin_dir = hub / "bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text(FAKE_CURL)
    (bin_dir / "curl").chmod(0o755)
    return hub


def run_download(hub, tmp_path, declared: dict[str, str], dest_via_env=False):
    headers = tmp_path / "headers"
    headers.mkdir(exist_ok=True)
    for name, digest in declared.items():
        (headers / f"{name}.headers").write_text(f'HTTP/2 302\r\nx-linked-etag: "{digest}"\r\n\r\nHTTP/2 200\r\n\r\n')
    (hub / "calls.log").unlink(missing_ok=True)
    env = dict(
        os.environ,
        PATH=f"{hub / 'bin'}:{os.environ['PATH']}",
        FAKE_HUB=str(hub),
        FAKE_HEADERS=str(headers),
        PYTHON=sys.executable,
    )
    dest = tmp_path / "data"
    if dest_via_env:
        env["CSE_DATA_DIR"] = str(dest)
        args = []
    else:
        env.pop("CSE_DATA_DIR", None)
        args = [str(dest)]
    result = subprocess.run(["bash", DOWNLOAD, *args], capture_output=True, text=True, env=env)
    calls = (hub / "calls.log").read_text().splitlines() if (hub / "calls.log").exists() else []
    return result, dest, calls


def test_download_installs_verifies_then_skips(fake_hub, tmp_path):
    declared = {name: sha256(fake_hub / name) for name in (CORPUS, "senteval.tar")}
    result, dest, calls = run_download(fake_hub, tmp_path, declared)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"export CSE_DATA_DIR={dest}\n"
    assert f"{CORPUS}: sha256 matches the hub's" in result.stderr
    assert "OK: " in result.stderr
    assert sorted(os.listdir(dest)) == sorted([CORPUS, "senteval"])
    assert (dest / GOLD).read_bytes() == open(os.path.join(SENTEVAL, GOLD[len("senteval/") :]), "rb").read()
    assert [c for c in calls if c.startswith("-fL")] == [
        f"-fL --retry 3 -o {dest}/{name}.part https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse"
        f"/resolve/main/{name}"
        for name in (CORPUS, "senteval.tar")
    ]

    again, _, calls = run_download(fake_hub, tmp_path, declared)
    assert again.returncode == 0, again.stderr
    assert calls == []
    assert again.stderr.count("already present") == 2


def test_download_hash_mismatch_keeps_no_final_file(fake_hub, tmp_path):
    result, dest, _ = run_download(fake_hub, tmp_path, {CORPUS: SHA})
    assert result.returncode == 1
    assert f"{CORPUS}: sha256 {sha256(fake_hub / CORPUS)} differs from the hub's {SHA}" in result.stderr
    assert os.listdir(dest) == [f"{CORPUS}.part"]
    assert result.stdout == ""


def test_download_without_declared_hash_says_so(fake_hub, tmp_path):
    result, dest, _ = run_download(fake_hub, tmp_path, {}, dest_via_env=True)
    assert result.returncode == 0, result.stderr
    for name in (CORPUS, "senteval.tar"):
        assert f"WARNING: the hub's headers for {name} declare no sha256" in result.stderr
    assert result.stdout == f"export CSE_DATA_DIR={dest}\n"
