#!/usr/bin/env bash
# Download the training corpus and the SentEval data into DEST, check them, and print the line that
# points the project at them:
#
#   scripts/download_data.sh [DEST]      # DEST: default $CSE_DATA_DIR, else ./data
#   eval "$(scripts/download_data.sh)"   # stdout is only the `export CSE_DATA_DIR=...` line
#
# Both files come from the SimCSE authors' dataset repository on the Hugging Face hub. Each download
# is checked against the sha256 the hub declares for it, then DEST as a whole against the pinned
# manifest scripts/data_checksums.txt (scripts/verify_data.py; set PYTHON to choose its interpreter).
# Files already in DEST are not downloaded again, so an interrupted run can simply be restarted.
set -euo pipefail

HUB_BASE="https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main"
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "download_data: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

sha256_of() {
    if command -v sha256sum >/dev/null; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

# Reads the response headers of every redirect hop (curl -sIL) on stdin and prints the sha256 the hub
# declares for an LFS file, or nothing. The hub's own hop carries it in x-linked-etag; a 64-hex etag
# is the fallback. Later hops are the storage backend's, whose etag need not be a sha256.
hub_sha256_from_headers() {
    tr -d '\r' | awk '
        { name = tolower($1); value = tolower($2); gsub(/"/, "", value) }
        length(value) != 64 || value !~ /^[0-9a-f]+$/ { next }
        name == "x-linked-etag:" && linked == "" { linked = value }
        name == "etag:" && etag == "" { etag = value }
        END { if (linked != "") print linked; else if (etag != "") print etag }'
}

# fetch NAME TARGET: download NAME from the hub to TARGET unless TARGET exists. The file only gets its
# final name once complete and matching the hub's sha256, so a TARGET that exists can be trusted.
fetch() {
    local name=$1 target=$2 url="$HUB_BASE/$1" expected actual
    if [[ -e $target ]]; then
        log "$target already present, not downloading it again"
        return
    fi
    expected=$(curl -sIL "$url" | hub_sha256_from_headers) || expected=""
    log "downloading $url"
    if ! curl -fL --retry 3 -o "$target.part" "$url"; then
        rm -f "$target.part"
        echo "error: could not download $url (curl's message above); nothing of it is kept" >&2
        echo "hint: check the network connection to huggingface.co and rerun, or point CSE_DATA_DIR at a copy of the data (docs/data.md)" >&2
        exit 1
    fi
    if [[ -z $expected ]]; then
        log "WARNING: the hub's headers for $name declare no sha256 (no x-linked-etag or etag with one);" \
            "it is checked only against scripts/data_checksums.txt"
    else
        actual=$(sha256_of "$target.part")
        [[ $actual == "$expected" ]] ||
            die "$name: sha256 $actual differs from the hub's $expected (download left at $target.part)"
        log "$name: sha256 matches the hub's ($expected)"
    fi
    mv "$target.part" "$target"
}

# install_senteval TAR TARGET: extract TAR and move its SentEval data directory (the one holding
# STS/STSBenchmark) to TARGET. The tar may hold the task folders at its top level or under
# downstream/ (SentEval's data/downstream), so the directory is located rather than assumed.
# A subshell, so that the EXIT trap cleans up the scratch directory however this ends.
install_senteval() (
    tar_file=$1
    target=$2
    [[ ! -e $target ]] || die "$target already exists"
    # Beside TARGET so that the final mv is a rename on one filesystem, never a half-done copy.
    scratch=$(mktemp -d "$(dirname "$target")/.senteval-extract.XXXXXX")
    trap 'rm -rf "$scratch"' EXIT
    # mktemp -d makes a 0700 directory; extracting one level down keeps the tree's own permissions.
    mkdir "$scratch/tar"
    tar -xf "$tar_file" -C "$scratch/tar"
    found=$(find "$scratch/tar" -type d -path '*/STS/STSBenchmark')
    [[ -n $found && $found != *$'\n'* ]] ||
        die "$tar_file: expected exactly one STS/STSBenchmark directory, found: ${found:-none}"
    mv "$(dirname "$(dirname "$found")")" "$target"
    log "SentEval data installed in $target"
)

main() {
    local dest=${1:-${CSE_DATA_DIR:-./data}}
    mkdir -p "$dest"
    dest=$(cd "$dest" && pwd)

    fetch wiki1m_for_simcse.txt "$dest/wiki1m_for_simcse.txt"
    if [[ -d $dest/senteval ]]; then
        log "$dest/senteval already present, not downloading it again"
    else
        fetch senteval.tar "$dest/senteval.tar"
        install_senteval "$dest/senteval.tar" "$dest/senteval"
        rm "$dest/senteval.tar"
    fi

    "${PYTHON:-python3}" "$SCRIPT_DIR/verify_data.py" "$dest" >&2
    printf 'export CSE_DATA_DIR=%q\n' "$dest"
}

# Sourced (`return` is then allowed), it only defines the functions: tests/test_download_data.py does so.
(return 0 2>/dev/null) || main "$@"
