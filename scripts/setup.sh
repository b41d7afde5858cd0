# Sourced by scripts/quickstart.sh and scripts/test.sh, the README's two commands: `cse_setup` finds
# a Python, the data and an environment holding requirements.txt, and sets
#   PY            the environment's python
#   CSE_DATA_DIR  (exported) the data: as set, else the local copy beside the checkout
#                 (../shared/data), else ./data, downloaded and checksummed by scripts/download_data.sh
# Python: an active virtualenv (or conda environment) is used as it is, else an existing .venv, else
# .venv is created with $PYTHON (default python3), which must be requires-python of pyproject.toml.
# Only requirements that are not installed at all are installed (scripts/missing_requirements.py);
# what is installed stays as it is. Every refusal and failure ends in one `error:` line and one
# `hint:` line on stderr; a .venv this command created and could not complete is removed, saying so.

CSE_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

cse_fail() { # STATUS MESSAGE HINT
    echo "error: $2" >&2
    echo "hint: $3" >&2
    exit "$1"
}

# The oldest Python pyproject.toml allows, e.g. 3.11.
cse_min_python() {
    sed -n 's/^requires-python = ">=\([0-9.]*\)"$/\1/p' "$CSE_REPO/pyproject.toml"
}

# PYTHON_COMMAND: prints its major.minor, or nothing where it does not run.
cse_python_version() {
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

# VERSION MINIMUM: whether major.minor VERSION is MINIMUM or later.
cse_version_at_least() {
    local have_major=${1%%.*} have_minor=${1#*.} want_major=${2%%.*} want_minor=${2#*.}
    ((have_major > want_major || (have_major == want_major && have_minor >= want_minor)))
}

# Sets PY, CSE_ENV (said to the user) and CSE_ENV_NEW (1: .venv is to be created from PY).
cse_choose_python() {
    local minimum version
    minimum=$(cse_min_python)
    CSE_ENV_NEW=0
    if [[ -n ${VIRTUAL_ENV:-} || -n ${CONDA_PREFIX:-} ]]; then
        CSE_ENV="the active environment ${VIRTUAL_ENV:-$CONDA_PREFIX}"
        PY=$(command -v python || command -v python3 || true)
        [[ -n $PY ]] || cse_fail 2 "$CSE_ENV has no python on PATH" "activate it again, or deactivate it (.venv is then used)"
        version=$(cse_python_version "$PY")
        [[ -n $version ]] && cse_version_at_least "$version" "$minimum" ||
            cse_fail 2 "$CSE_ENV runs Python ${version:-that does not start}; cse needs Python >= $minimum" \
                "activate an environment with Python >= $minimum, or deactivate it (.venv is then used)"
    elif [[ -L $CSE_REPO/.venv && ! -e $CSE_REPO/.venv ]]; then
        # a link to nowhere: creating .venv would go through it, and removing a half-made one would
        # remove the user's link
        cse_fail 2 ".venv is a link to $(readlink "$CSE_REPO/.venv"), which does not exist" \
            "point it at an existing virtualenv, or remove the link (rm .venv) and rerun: .venv is then created"
    elif [[ -e $CSE_REPO/.venv ]]; then
        CSE_ENV="$CSE_REPO/.venv"
        PY=$CSE_REPO/.venv/bin/python
        version=$(cse_python_version "$PY")
        [[ -n $version ]] && cse_version_at_least "$version" "$minimum" ||
            cse_fail 2 "$CSE_ENV holds Python ${version:-that does not start}; cse needs Python >= $minimum" \
                "remove it (rm -r .venv) and rerun: it is created again from \$PYTHON (default python3)"
    else
        local base=${PYTHON:-python3}
        command -v "$base" >/dev/null ||
            cse_fail 2 "no $base on PATH; cse needs Python >= $minimum" \
                "install Python $minimum or newer (python.org, or your package manager), or name one: PYTHON=/path/to/python3.X"
        version=$(cse_python_version "$base")
        [[ -n $version ]] && cse_version_at_least "$version" "$minimum" ||
            cse_fail 2 "$base is Python ${version:-that does not start}; cse needs Python >= $minimum" \
                "install Python $minimum or newer and name it: PYTHON=python$minimum (or its path) before the same command"
        CSE_ENV="$CSE_REPO/.venv (new)"
        CSE_ENV_NEW=1
        PY=$base
    fi
}

# Exports CSE_DATA_DIR and says in one line where the data comes from.
cse_find_data() {
    if [[ -n ${CSE_DATA_DIR:-} ]]; then
        [[ -d $CSE_DATA_DIR/senteval ]] ||
            cse_fail 2 "CSE_DATA_DIR=$CSE_DATA_DIR holds no senteval/" \
                "point it at the data (docs/data.md), or unset it to use ../shared/data or download into ./data"
        echo "data: $CSE_DATA_DIR (CSE_DATA_DIR)"
        return
    fi
    local beside
    beside=$(cd "$CSE_REPO/.." && pwd)/shared/data
    if [[ -d $beside/senteval ]]; then
        export CSE_DATA_DIR=$beside
        echo "data: $beside, the local copy beside the checkout"
        return
    fi
    if [[ -d $CSE_REPO/data/senteval && -f $CSE_REPO/data/wiki1m_for_simcse.txt ]]; then
        echo "data: $CSE_REPO/data, downloaded before; checking it against scripts/data_checksums.txt"
    else
        echo "data: no ../shared/data beside the checkout; downloading wiki1m and SentEval into $CSE_REPO/data (checksummed)"
    fi
    PYTHON=$PY bash "$CSE_REPO/scripts/download_data.sh" "$CSE_REPO/data" >/dev/null || {
        local status=$?
        rmdir "$CSE_REPO/data" 2>/dev/null || true # left only where nothing was downloaded into it
        exit $status
    }
    export CSE_DATA_DIR=$CSE_REPO/data
}

# Creates .venv where CSE_ENV_NEW says so, then installs the requirements it lacks.
cse_install() {
    local missing constraints="" pinned
    if ((CSE_ENV_NEW)); then
        # a .venv half made (interrupted, or pip failing) is removed rather than reused as it is
        trap 'rm -rf "$CSE_REPO/.venv"; echo "error: interrupted; the incomplete .venv is removed" >&2; exit 130' INT TERM
        "$PY" -m venv "$CSE_REPO/.venv" || {
            rm -rf "$CSE_REPO/.venv"
            cse_fail 1 "$PY -m venv could not create .venv (nothing is left of it)" \
                "install Python's venv module (Debian, Ubuntu: apt install python$(cse_python_version "$PY")-venv) and rerun"
        }
        PY=$CSE_REPO/.venv/bin/python
    fi
    missing=$("$PY" "$CSE_REPO/scripts/missing_requirements.py") || exit
    if [[ -z $missing ]]; then
        echo "environment: $CSE_ENV, every requirement installed"
    else
        echo "environment: $CSE_ENV; installing what it lacks of requirements.txt:" $missing
        "$PY" -m pip --version >/dev/null 2>&1 ||
            cse_fail 2 "$CSE_ENV has no pip to install $(wc -w <<<"$missing") requirements" \
                "install them into it yourself (pip install -r requirements.txt), or deactivate it (.venv is then used)"
        pinned=()
        if ((!CSE_ENV_NEW)); then
            # what the environment holds is pinned: installing what is missing never replaces it
            constraints=$(mktemp)
            "$PY" -m pip list --format=freeze >"$constraints" 2>/dev/null
            pinned=(-c "$constraints")
        fi
        # shellcheck disable=SC2086  # one requirement a word
        if ! "$PY" -m pip install -q "${pinned[@]}" $missing; then
            rm -f "$constraints"
            if ((CSE_ENV_NEW)); then
                rm -rf "$CSE_REPO/.venv"
                cse_fail 1 "pip could not install the requirements (its messages above); the new .venv is removed" \
                    "check the connection to the package index (pip config list), then rerun the same command"
            fi
            cse_fail 1 "pip could not install all of $(wc -w <<<"$missing") requirements into $CSE_ENV (its messages above say which)" \
                "check the connection to the package index (pip config list), then rerun the same command: it installs what is still missing"
        fi
        rm -f "$constraints"
    fi
    trap - INT TERM
}

cse_setup() {
    cse_choose_python
    cse_find_data
    cse_install
    # what the commands start (the table scripts' python3 -m sweep, accelerate) is the environment's, as
    # if it were activated
    PATH="$(dirname "$PY"):$PATH"
    export PATH
}
