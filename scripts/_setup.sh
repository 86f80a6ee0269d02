# Shared setup for scripts/test and scripts/demo (sourced, not run).
# Leaves the caller in the repo root with .venv ready and a MariaDB (or MySQL) server binary installed.
# scripts/test also calls setup_test_servers (MariaDB 11.8, the brokers, promtool): the demo needs none of them.
#
# `pip install -e` runs only when something it depends on changed: a stamp in .venv holds the hash of the
# extras, pyproject.toml, constraints.txt, setup.py and the C sources, and the names of the built extensions and
# of the editable install; when the stamp matches, setup takes well under a second and prints nothing. It
# installs the versions constraints.txt pins (`-c`), with BINLOGD_REQUIRE_C=1 (a C extension that fails to build
# fails setup), and shows pip's warnings. Each slow step says on stderr what it does ("setup: ..." lines).
# BINLOGD_PIP: the pip command to run (default: .venv/bin/pip; the tests point it at a fake).

cd "$(dirname "${BASH_SOURCE[0]}")/.."

_step() { echo "setup: $*" >&2; }

if [ ! -x .venv/bin/python ]; then
    _step "creating the virtual environment .venv (python3 -m venv)"
    python3 -m venv .venv
fi

_extras='.[daemon,test,spark,bus]'
_stamp_file=.venv/.binlogd-setup-stamp

_setup_stamp() {
    {
        echo "$_extras"
        # a missing file changes the hash; it is no error here
        cat pyproject.toml constraints.txt setup.py protocol/*.c protocol/*.h library/*.c library/*.h daemon/sinks/*.c \
            2>/dev/null || true
        ls protocol/*.so library/*.so daemon/sinks/*.so .venv/lib/python*/site-packages/__editable__*binlogd* 2>/dev/null || true
    } | sha256sum | cut -d' ' -f1
}

if [ "$(cat "$_stamp_file" 2>/dev/null)" != "$(_setup_stamp)" ]; then
    if [ -e "$_stamp_file" ]; then
        _step "installing binlogd into .venv again (its sources or pinned versions changed)"
    else
        _step "installing binlogd and the packages it needs into .venv (pip, quiet): about 2 minutes the first time"
    fi
    _pip_started=$SECONDS
    _pip_log="$(mktemp)"
    # pip's -q output is its warnings and errors; the notes about ignored 'file:///opt/...' locations are noise
    if BINLOGD_REQUIRE_C=1 ${BINLOGD_PIP:-.venv/bin/pip} install -q --disable-pip-version-check \
        -c constraints.txt -e "$_extras" >"$_pip_log" 2>&1; then
        grep -v "^WARNING: Location 'file:///opt/.*' is ignored" "$_pip_log" >&2 || true
        rm -f "$_pip_log"
        _setup_stamp >"$_stamp_file"
        _step "installed in $((SECONDS - _pip_started)) s; the next runs skip this step until something changes"
    else
        grep -v "^WARNING: Location 'file:///opt/.*' is ignored" "$_pip_log" >&2 || true
        rm -f "$_pip_log" "$_stamp_file"
        echo "pip install -c constraints.txt -e '$_extras' failed" \
            "(with BINLOGD_REQUIRE_C=1: the C extensions must build)" >&2
        exit 1
    fi
fi

_have_server() {
    PATH="$PATH:/usr/sbin:/usr/local/sbin" command -v mariadbd >/dev/null 2>&1 \
        || PATH="$PATH:/usr/sbin:/usr/local/sbin" command -v mysqld >/dev/null 2>&1 \
        || [ -n "${BINLOGD_MYSQLD:-}" ]
}

if ! _have_server; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "mariadbd not found: installing mariadb-server and mariadb-client with apt-get" >&2
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mariadb-server mariadb-client
    else
        echo "mariadbd not found: install MariaDB (e.g. 'sudo apt-get install -y mariadb-server mariadb-client')" >&2
        echo "or set BINLOGD_MYSQLD to a mariadbd/mysqld binary; server tests will be skipped otherwise" >&2
    fi
fi

# What only the test suite uses; each is quick once done.
setup_test_servers() {
    local cache="${XDG_CACHE_HOME:-$HOME/.cache}/binlogd"
    # MariaDB 11.8, the suite's second real server (downloaded once into ~/.cache/binlogd; never installed).
    [ -d "$cache/mariadb-11.8" ] || _step "fetching MariaDB 11.8 for the tests into $cache (once per machine)"
    scripts/fetch-mariadb >&2 || echo "the MariaDB 11.8 tests will be skipped with the reason above" >&2
    [ -d "$cache/mysql-9.7" ] || _step "fetching MySQL 9.7 for the tests into $cache (once per machine)"
    scripts/fetch-mysql >&2 || echo "the MySQL 9.7 tests will be skipped with the reason above" >&2

    # redis-server, nats-server and PostgreSQL for the bus-sink tests (started privately by the tests).
    if ! { command -v redis-server && command -v nats-server \
           && PATH="$PATH:$(printf '%s:' /usr/lib/postgresql/*/bin)" command -v initdb; } >/dev/null 2>&1; then
        _step "installing the brokers the bus tests start (redis-server, nats-server, PostgreSQL) if possible"
    fi
    scripts/install-brokers \
        || echo "the broker tests will fail (under CI=true) or skip: install the brokers named above" >&2

    # promtool checks the Prometheus alert rules (deploy/prometheus); Debian ships it in "prometheus".
    if ! command -v promtool >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "promtool not found: installing prometheus with apt-get (for the alert-rule tests)" >&2
        (apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 \
            || { apt-get update >/dev/null && apt-get install -y --no-install-recommends prometheus >/dev/null; }) \
            || echo "could not install prometheus: the promtool tests will be skipped" >&2
    fi
}
