# Shared setup for scripts/test and scripts/demo (sourced, not run).
# Leaves the caller in the repo root with .venv ready, a MariaDB (or MySQL) server binary installed
# and MariaDB 11.8 unpacked into ~/.cache/binlogd (scripts/fetch-mariadb).

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
_pip_log="$(mktemp)"
if ! .venv/bin/pip install -q --disable-pip-version-check -e '.[daemon,test,spark]' >"$_pip_log" 2>&1; then
    cat "$_pip_log" >&2
    rm -f "$_pip_log"
    echo "pip install -e '.[daemon,test,spark]' failed" >&2
    exit 1
fi
rm -f "$_pip_log"

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

# MariaDB 11.8, the suite's second real server (downloaded once into ~/.cache/binlogd; never installed).
scripts/fetch-mariadb >&2 || echo "the MariaDB 11.8 tests will be skipped with the reason above" >&2

# promtool checks the Prometheus alert rules (deploy/prometheus); Debian ships it in "prometheus".
if ! command -v promtool >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "promtool not found: installing prometheus with apt-get (for the alert-rule tests)" >&2
    (apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 \
        || { apt-get update >/dev/null && apt-get install -y --no-install-recommends prometheus >/dev/null; }) \
        || echo "could not install prometheus: the promtool tests will be skipped" >&2
fi
