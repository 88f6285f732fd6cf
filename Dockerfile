# dra-migration-webhook image, for people who build with Docker:
#   docker build -t dra-migration-webhook:0.2.0 .
# The version label is pyproject.toml's version (the one version source; tests/deploy/test_release.py checks it).
# `make release` builds the same image without Docker (deploy/image/build.py: mmdebstrap + umoci) as an OCI
# archive; tests/deploy/test_image.py keeps the two equal: same Debian bookworm and its python3 (3.11), same
# /opt/venv, user, entrypoint, command, environment and labels.
# Two stages: the builder installs the package and its dependencies (all from wheels) into a
# virtualenv; the final stage copies only that virtualenv onto a fresh base, so it carries no
# pip caches, no build tools and no compilers.

ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates libstdc++6 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/*.log

FROM base AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Same path as in the final stage: console scripts carry the venv's absolute interpreter path.
RUN /usr/bin/python3 -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
# Our package is pure Python: build its wheel, then install it and every dependency from wheels
# only (--only-binary), so the build fails instead of silently compiling C code.
RUN /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --only-binary=:all: /wheels/*.whl \
 && /opt/venv/bin/pip uninstall --yes pip setuptools

FROM base
LABEL org.opencontainers.image.title="dra-migration-webhook" \
      org.opencontainers.image.description="Admission webhook moving GPU workloads from device plugins to Kubernetes DRA" \
      org.opencontainers.image.version="0.2.0" \
      org.opencontainers.image.source="https://github.com/dra-migration-webhook/dra-migration-webhook" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MALLOC_ARENA_MAX=2 \
    PROMETHEUS_MULTIPROC_DIR=/var/run/prometheus \
    DRA_WEBHOOK_POLICY=/etc/dra-webhook/policy
COPY --from=builder /opt/venv /opt/venv
# The bundled default policy; in Kubernetes the ConfigMap volume is mounted over this directory.
COPY policies/default.yaml /etc/dra-webhook/policy/default.yaml
# Writable for the uid when run without Kubernetes volumes (in a pod: emptyDirs, read-only root).
RUN mkdir -p /var/run/prometheus /etc/dra-webhook/tls \
 && chown 65532:65532 /var/run/prometheus
# Numeric uid:gid so runAsNonRoot can verify it (a user name fails with CreateContainerConfigError).
USER 65532:65532
WORKDIR /
EXPOSE 8443
ENTRYPOINT ["dra-webhook", "serve"]
CMD ["--policy", "/etc/dra-webhook/policy", "--cert-dir", "/etc/dra-webhook/tls", "--bind", "0.0.0.0:8443"]
