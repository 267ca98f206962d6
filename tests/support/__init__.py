"""Fixtures, fakes and helpers shared by the tests (and, for the real-component ones, by the
benchmarks). Test modules import helpers from here and never from each other; the pytest fixtures
defined here are registered once, by `pytest_plugins` in tests/conftest.py.

    repo             ROOT, SHARED_DATA, load_module (repository scripts by path)
    net              free ports, HTTP get/post, /metrics scrapes
    agent_process    the agent as a subprocess
    otlp             the real SDK recording into memory, OTLP encodings, an assembler, intake stand-ins
    spans            RAG interactions in the instrumentation conventions
    kafka_broker     a real Kafka-protocol broker (fixture `broker`), producing and consuming
    kafka_agent      agents consuming a topic, committed offsets, results read back
    redis_server     a real redis-server process
    llm_server       the OpenAI-compatible test judge server
    pinecone_server  a Pinecone-compatible vector DB stand-in
    alerting         Prometheus + Alertmanager + webhook around agents
    tls              a test PKI
    hostile          hostile OTLP bodies (hypothesis strategies)
    browser          headless chromium page visits
    pipeline         in-memory pipeline parts (ListExporter)
    cli              `ragpulse eval` as a subprocess, JSONL results read back
    labelled         the labelled shared samples as cases, and a judge's score of a case
"""
