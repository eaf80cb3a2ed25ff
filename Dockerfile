# syntax=docker/dockerfile:1
# The pwevent image: the `pwevent` command and the worker's dependencies, nothing else unless
# the EXTRAS build argument names extras (none by default: not the eval, demo or avro extras). Used by docker-compose.yml and by the Kubernetes manifests in
# deploy/kubernetes/ (topic creation, workers, replay).
#
#   docker build -t pwevent:0.1.0 .
#   docker run --rm pwevent:0.1.0 --help
#   docker build --build-arg EXTRAS=avro -t pwevent:0.1.0-avro .   # with extras (comma-separated)
#
# Two stages: `build` turns the sources into wheels (pwevent's and every dependency's, so that
# anything without a binary wheel is built here); the runtime stage installs those wheels from a
# read-only mount, offline, without compilers, and keeps no wheel in a layer. The mount needs
# BuildKit, the default builder of Docker Engine 23+ and of Compose v2.

FROM python:3.11-slim AS build
# extras to install besides the worker's dependencies, e.g. "avro" (Avro source topics)
ARG EXTRAS=""

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the package is built from: the image never sees a local virtualenv, caches or data.
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY mechanisms ./mechanisms
COPY streams ./streams
RUN pip wheel --prefer-binary --wheel-dir /wheels ".${EXTRAS:+[$EXTRAS]}"

FROM python:3.11-slim
ARG EXTRAS=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# `pwevent` with the worker's dependencies (and EXTRAS, if given), from the build stage's wheels.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels "pwevent${EXTRAS:+[$EXTRAS]}" \
    && useradd --create-home --uid 10001 pwevent \
    && mkdir -p /data \
    && chown pwevent:pwevent /data

# Worker state (RocksDB tables) lives under --data-dir /data; mount a volume there.
USER 10001:10001
WORKDIR /home/pwevent

ENTRYPOINT ["pwevent"]
CMD ["--help"]
