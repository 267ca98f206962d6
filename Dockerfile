# ragpulse agent image: multi-stage (build tools never reach the runtime image), slim, non-root.
# Dependencies come from the hashed lock file, like CI installs them.
#   docker build -t ragpulse .
#   docker run -p 4317:4317 -p 4318:4318 -p 9464:9464 ragpulse   # embedded defaults: OTLP/gRPC, OTLP/HTTP, /metrics
FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements/runtime.lock requirements/runtime.lock
RUN python -m venv /opt/ragpulse \
 && /opt/ragpulse/bin/pip install --require-hashes -r requirements/runtime.lock
COPY pyproject.toml README.md ./
COPY agent agent
RUN /opt/ragpulse/bin/pip install --no-deps . \
 && /opt/ragpulse/bin/python -m compileall -q /opt/ragpulse

FROM python:3.11-slim
COPY --from=build /opt/ragpulse /opt/ragpulse
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/ragpulse-entrypoint
# Keys (RAGPULSE_JUDGE_API_KEY, OPENAI_API_KEY, ...) only from the environment at run time, or
# from a mounted secret file named by NAME_FILE (see the entrypoint); never in the image.
# The listeners bind all interfaces so other containers (Collector, Prometheus) can reach the
# agent; outside a container the default stays 127.0.0.1. On a network you do not fully trust, set
# RAGPULSE_OTLP_TLS_CERT_FILE/_KEY_FILE, RAGPULSE_OTLP_BEARER_TOKEN_FILE and
# RAGPULSE_METRICS_WEB_CONFIG_FILE (README "Protecting the endpoints", docs/security.md).
ENV PATH=/opt/ragpulse/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RAGPULSE_OTLP_LISTEN=0.0.0.0:4318 \
    RAGPULSE_OTLP_GRPC_LISTEN=0.0.0.0:4317 \
    RAGPULSE_METRICS_LISTEN=0.0.0.0:9464 \
    LITELLM_LOCAL_MODEL_COST_MAP=True
# Where `ragpulse canary` keeps its accepted run (canary_state_file in docker-compose.yml): owned
# by the runtime user, so a fresh named volume mounted there is writable.
RUN mkdir -p /var/lib/ragpulse-canary && chown 65532:65532 /var/lib/ragpulse-canary
# 65532: the conventional "nonroot" uid; no home, no shell login, no write access to the venv.
USER 65532:65532
EXPOSE 4317 4318 9464
STOPSIGNAL SIGTERM
# /healthz on the port of RAGPULSE_METRICS_LISTEN, whatever it is set to at run time.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('RAGPULSE_METRICS_LISTEN', ':9464').rsplit(':', 1)[1]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2)"]
ENTRYPOINT ["ragpulse-entrypoint"]
CMD ["run"]
