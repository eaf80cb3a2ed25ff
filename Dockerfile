# The pwevent image: the `pwevent` command and nothing else. Used by docker-compose.yml and by the
# Kubernetes manifests in deploy/kubernetes/ (topic creation, workers, replay).
#
#   docker build -t pwevent:0.1.0 .
#   docker run --rm pwevent:0.1.0 --help
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the package is built from: the image never sees a local virtualenv, caches or data.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY mechanisms ./mechanisms
COPY streams ./streams
RUN pip install . \
    && rm -rf /src \
    && useradd --create-home --uid 10001 pwevent \
    && mkdir -p /data \
    && chown pwevent:pwevent /data

# Worker state (RocksDB tables) lives under --data-dir /data; mount a volume there.
USER 10001:10001
WORKDIR /home/pwevent

ENTRYPOINT ["pwevent"]
CMD ["--help"]
