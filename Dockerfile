# syntax=docker/dockerfile:1
# binlogd: the replication daemon in a slim, non-root, read-only-root-friendly image.
#
#   docker build -t binlogd:0.1.0 .
#   docker run --read-only --tmpfs /tmp -p 9108:9108 -v binlogd-data:/var/lib/binlogd \
#       -v "$PWD/binlogd.toml:/etc/binlogd/binlogd.toml:ro" --env-file binlogd.env \
#       binlogd:0.1.0 run --config /etc/binlogd/binlogd.toml
#
# The only directory binlogd writes is the volume /var/lib/binlogd: the checkpoint
# (checkpoint.json and its flock, checkpoint.json.lock) and the sink (changes/ for jsonl, the binlog
# copies for archive) are there by default. Configuration and secrets come at run time (a mounted
# TOML, BINLOGD_SECTION__KEY variables, source.password_file); none is baked in. See deploy/README.md.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# ---------------------------------------------------------------- build: a venv with binlogd[daemon,storage]
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# A C compiler for the C extensions (setup.py: protocol._rowimage, protocol._skim, protocol._textrows,
# library._jsonrows, library._sqlrows, daemon._frames); it stays in this stage. BINLOGD_REQUIRE_C=1: a failed compile fails the image build,
# so an image never ships the slower pure-Python fallbacks by accident.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the wheel needs (.dockerignore keeps the rest, .venv, .git and any secrets, out).
# setup.py* : the extension's build hook, copied when the checkout has one.
COPY pyproject.toml README.md setup.py* ./
COPY protocol/ protocol/
COPY library/ library/
COPY daemon/ daemon/
COPY binlogd/ binlogd/
COPY cli/ cli/
COPY pipeline/ pipeline/
# The storage extra (fsspec, s3fs) serves the archive's [sink.upload]. Every dependency ships manylinux
# wheels; only binlogd's own extensions are compiled. pip and setuptools leave the venv once it
# is built, and the bytecode is compiled now, since the root filesystem is read-only at run time.
# hadolint ignore=DL3013
RUN python -m venv /opt/binlogd \
 && BINLOGD_REQUIRE_C=1 /opt/binlogd/bin/pip install --no-compile ".[daemon,storage]" \
 && /opt/binlogd/bin/pip uninstall --yes pip setuptools \
 && python -m compileall -q /opt/binlogd/lib

# ---------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="binlogd" \
      org.opencontainers.image.description="MySQL/MariaDB replication-stream CDC daemon" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric uid/gid (Kubernetes runAsNonRoot checks a number); the state directory is the
# only one it owns.
RUN groupadd --system --gid 10001 binlogd \
 && useradd --system --uid 10001 --gid binlogd --home-dir /var/lib/binlogd --no-create-home \
        --shell /usr/sbin/nologin binlogd \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/binlogd \
 && install -d -m 0755 /etc/binlogd
COPY --from=build /opt/binlogd /opt/binlogd
# Not secrets: where to find the program, no bytecode writes, unbuffered logs, and metrics on all
# interfaces of the container (the variable wins over metrics.listen in a mounted TOML).
ENV PATH=/opt/binlogd/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    BINLOGD_METRICS__LISTEN=0.0.0.0:9108
WORKDIR /var/lib/binlogd
VOLUME ["/var/lib/binlogd"]
EXPOSE 9108
USER 10001:10001
# /healthz answers 200 while the process is alive; the port follows BINLOGD_METRICS__LISTEN.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('BINLOGD_METRICS__LISTEN', ':9108').rpartition(':')[2]; urllib.request.urlopen('http://127.0.0.1:' + port + '/healthz', timeout=4)"]
ENTRYPOINT ["binlogd"]
CMD ["run"]
