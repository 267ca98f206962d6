# ragpulse agent image. Dependencies come from the hashed lock file, like CI installs them.
FROM python:3.11-slim AS build
WORKDIR /src
COPY requirements/runtime.lock requirements/runtime.lock
RUN python -m venv /opt/ragpulse \
 && /opt/ragpulse/bin/pip install --no-cache-dir --disable-pip-version-check --require-hashes \
      -r requirements/runtime.lock
COPY pyproject.toml README.md ./
COPY agent agent
RUN /opt/ragpulse/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps .

FROM python:3.11-slim
COPY --from=build /opt/ragpulse /opt/ragpulse
ENV PATH=/opt/ragpulse/bin:$PATH \
    RAGPULSE_OTLP_LISTEN=0.0.0.0:4318 \
    RAGPULSE_METRICS_LISTEN=0.0.0.0:9464 \
    LITELLM_LOCAL_MODEL_COST_MAP=True
USER 65532:65532
EXPOSE 4318 9464
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz')"
ENTRYPOINT ["ragpulse"]
CMD ["run"]
