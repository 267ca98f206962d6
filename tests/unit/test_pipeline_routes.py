"""The shape of the pipeline: routes with their own chains, observers on a list, marks decided once
before every exporter reads them, and one lifecycle order for the agent's components."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry

from agent.config import PipelineSettings, load_settings
from agent.delivery import Delivery, JudgeGate, Leases
from agent.evaluate import Evaluation
from agent.idempotency import MemoryIdempotency
from agent.infra.lifecycle import Periodic
from agent.model import Evaluated, Mark, MetricResult, RagInteraction, Span
from agent.otlp.assemble import Assembly
from agent.otlp.decode import DecodedRequest
from agent.pipeline import Agent, Pipeline, Route
from agent.sampling import RateTable, RuleSampler
from agent.telemetry import Telemetry
from tests.support.otlp import Recorder, assembler, decoded
from tests.support.spans import rag_trace


class Watcher:
    """An observer that writes down every hook it is called with."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log
        self.evaluated: list[Evaluated] = []

    def on_spans(self, spans: Sequence[Span], source: str = "") -> None:
        self.log.append(f"{self.name}.spans:{len(spans)}")

    def on_assembly(self, assembly: Assembly) -> None:
        self.log.append(f"{self.name}.assembly:{len(assembly.interactions)}")

    def on_interaction(self, interaction: RagInteraction) -> None:
        self.log.append(f"{self.name}.interaction:{interaction.route}")

    def on_evaluated(self, evaluated: Evaluated) -> None:
        self.evaluated.append(evaluated)
        self.log.append(f"{self.name}.evaluated:{evaluated.interaction.route}")

    async def start(self) -> None:
        self.log.append(f"{self.name}.start")

    async def flush(self) -> None: ...

    async def shutdown(self, timeout: float) -> None:
        self.log.append(f"{self.name}.shutdown")


class Scorer:
    def __init__(self, value: float) -> None:
        self.value = value

    async def assess(self, interaction: RagInteraction) -> Evaluation:
        return Evaluation([MetricResult.ok("m", self.value, judge="test")])


class Keeper:
    """An exporter that keeps what it was given."""

    def __init__(self) -> None:
        self.got: list[Evaluated] = []

    async def export(self, evaluated: Evaluated) -> None:
        self.got.append(evaluated)

    async def start(self) -> None: ...

    async def flush(self) -> None: ...

    async def shutdown(self, timeout: float) -> None: ...


class Drawer:
    """A marker that marks every interaction and counts how often it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    def mark(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> Mark | None:
        self.asked += 1
        return Mark("drawn", {"test.drawn": True}, weight=2.0)


def _pipeline(routes: dict[str, Route]) -> Pipeline:
    telemetry = Telemetry(CollectorRegistry())
    leases = Leases(MemoryIdempotency("t", 30, 60), "t", lease_seconds=30, done_seconds=60)
    return Pipeline(
        assembler(),
        routes,
        lambda interaction: "checks" if interaction.route == "/check" else "main",
        Delivery(leases, JudgeGate(), telemetry.evaluation),
        telemetry.pipeline,
        PipelineSettings(max_pending=100, eval_concurrency=2),
    )


def test_each_route_has_its_own_chain_and_observers_and_marks_are_decided_once() -> None:
    log: list[str] = []
    main_watcher, check_watcher = Watcher("main", log), Watcher("checks", log)
    main_out, check_out, drawer = Keeper(), Keeper(), Drawer()
    second_exporter = Keeper()
    routes = {
        # The main route samples nothing at rate 0 except what it keeps; here rate 1.
        "main": Route(
            "main",
            Scorer(0.25),
            [main_out, second_exporter],
            sampler=RuleSampler(RateTable(1.0, {}, {})),
            observers=[main_watcher],
            markers=[drawer],
        ),
        "checks": Route("checks", Scorer(0.75), [check_out], observers=[check_watcher]),
    }
    recorder = Recorder()
    rag_trace(recorder, route="/ask")
    rag_trace(recorder, route="/check")

    async def scenario() -> None:
        pipeline = _pipeline(routes)
        await pipeline.start()
        pipeline.accept(DecodedRequest(decoded(recorder.spans())), "test")
        for _ in range(200):
            if main_out.got and check_out.got:
                break
            await asyncio.sleep(0.01)
        await pipeline.shutdown(1.0)

    asyncio.run(scenario())
    # Each interaction went down its own route: its own evaluator, exporters and observers.
    assert [(e.interaction.route, e.results[0].value) for e in main_out.got] == [("/ask", 0.25)]
    assert [(e.interaction.route, e.results[0].value) for e in check_out.got] == [("/check", 0.75)]
    assert main_out.got[0].decision.reason == "rate" and check_out.got[0].decision.reason == "route"
    # Spans and assemblies reach every observer; interactions and results only their route's.
    assert "main.spans:6" in log and "checks.spans:6" in log
    assert "main.interaction:/ask" in log and "main.interaction:/check" not in log
    assert "checks.interaction:/check" in log and "checks.interaction:/ask" not in log
    assert [e.interaction.route for e in main_watcher.evaluated] == ["/ask"]
    # One decision, one value: every exporter and the observers got the very same Evaluated.
    assert drawer.asked == 1
    assert second_exporter.got[0] is main_out.got[0] is main_watcher.evaluated[0]
    assert main_out.got[0].mark("drawn") == Mark("drawn", {"test.drawn": True}, weight=2.0)
    assert main_out.got[0].mark_attributes() == {"test.drawn": True}
    assert check_out.got[0].marks == ()
    # Lifecycle inside the pipeline: observers start after the exporters and stop before them.
    assert log.index("main.start") < log.index("main.spans:6")
    assert log[-2:] == ["checks.shutdown", "main.shutdown"]


class Part:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def start(self, *intake: object) -> None:
        self.log.append(f"{self.name}.start")

    async def flush(self) -> None:
        self.log.append(f"{self.name}.flush")

    async def stop(self) -> None:
        self.log.append(f"{self.name}.stop")

    async def shutdown(self, timeout: float, **kwargs: object) -> None:
        self.log.append(f"{self.name}.shutdown")

    def ready(self) -> bool:
        return True


def test_the_agent_starts_its_components_in_order_and_stops_them_in_reverse_after_the_commit() -> None:
    log: list[str] = []
    agent = Agent(
        Part("source", log),  # type: ignore[arg-type]
        Part("pipeline", log),  # type: ignore[arg-type]
        [Part("server", log), Part("dependencies", log), Part("budget", log)],
    )

    async def scenario() -> None:
        await agent.start()
        await agent.shutdown()

    asyncio.run(scenario())
    assert log == [
        "server.start", "dependencies.start", "budget.start", "pipeline.start", "source.start",
        # The commit order (agent/delivery.py): stop intake, finish the work, commit, then the rest.
        "source.stop", "pipeline.shutdown", "source.shutdown",
        "budget.shutdown", "dependencies.shutdown", "server.shutdown",
    ]  # fmt: skip


def test_build_agent_lists_its_components_in_start_order() -> None:
    from agent.build import build_agent

    plain = build_agent(load_settings(environ={}), CollectorRegistry())
    assert [type(c).__name__ for c in plain.components] == [
        "MetricsServer",
        "Dependencies",
        "BudgetController",
    ]
    with_redis = build_agent(
        load_settings(environ={"RAGPULSE_REDIS_URL": "redis://127.0.0.1:1/0"}), CollectorRegistry()
    )
    # The Redis client closes after everything that uses it has stopped.
    assert [type(c).__name__ for c in with_redis.components] == [
        "MetricsServer", "Dependencies", "RedisConnection", "BudgetController",
    ]  # fmt: skip
    production = plain.pipeline._routes["production"]
    assert [type(o).__name__ for o in production.observers] == ["Activity", "SignalRecorder"]
    assert [type(o).__name__ for o in plain.pipeline._routes["probes"].observers] == ["ProbeResults"]


# What the agent calls on each component of its ordered lists (agent/infra/lifecycle.py), and on
# its source (agent/sources/base.py: started with the intake, stopped before the pipeline drains).
LIFECYCLE_CALLS = {"start": (), "flush": (), "shutdown": (1.0,)}
SOURCE_CALLS = {"start": (object(),), "flush": (), "stop": (), "shutdown": (1.0,)}
# Every optional part switched on that builds without a server to talk to.
FULL_ENVIRON = {
    "RAGPULSE_REDIS_URL": "redis://127.0.0.1:1/0",
    "RAGPULSE_LABEL_SAMPLE_RATE": "0.1",
    "RAGPULSE_RESULTS_FILE": "results.jsonl",
    "RAGPULSE_RESULTS_TOPIC": "ragpulse-results",
    "RAGPULSE_RESULTS_OTLP_ENDPOINT": "http://127.0.0.1:1/v1/traces",
}


def _lifecycle_gaps(component: object, calls: dict[str, tuple[object, ...]]) -> list[str]:
    gaps = []
    for name, args in calls.items():
        method = getattr(component, name, None)
        if not inspect.iscoroutinefunction(method):
            gaps.append(f"{type(component).__name__}.{name} is missing or not async")
            continue
        try:
            inspect.signature(method).bind(*args)
        except TypeError as exc:
            gaps.append(f"{type(component).__name__}.{name}{args}: {exc}")
    return gaps


@pytest.mark.parametrize(
    "environ",
    [{}, FULL_ENVIRON, {**FULL_ENVIRON, "RAGPULSE_SOURCE": "kafka"}],
    ids=["default", "everything-on-otlp", "everything-on-kafka"],
)
def test_every_component_of_the_agent_implements_the_lifecycle(environ: dict[str, str]) -> None:
    from agent.build import build_agent
    from agent.sources.composite import CompositeSource

    agent = build_agent(load_settings(environ=environ), CollectorRegistry())
    components = [*agent.components, *agent.pipeline.components]
    gaps = [gap for c in components for gap in _lifecycle_gaps(c, LIFECYCLE_CALLS)]
    sources = list(agent.source.sources) if isinstance(agent.source, CompositeSource) else [agent.source]
    gaps += [gap for s in [agent.source, *sources] for gap in _lifecycle_gaps(s, SOURCE_CALLS)]
    assert gaps == []
    # Whatever a route holds that has a lifecycle is on the pipeline's list, started and stopped.
    held = {id(c) for c in agent.pipeline.components}
    routes = agent.pipeline._routes.values()
    assert all(id(part) in held for route in routes for part in [*route.exporters, *route.observers])
    if environ:  # the optional parts are there to be checked
        optional = {"RedisConnection", "ResultsFileExporter", "KafkaResultsExporter", "OtlpResultsExporter"}
        assert optional | {"PpiAggregator"} <= {type(c).__name__ for c in components}
    kafka = environ.get("RAGPULSE_SOURCE") == "kafka"
    assert {type(s).__name__ for s in sources} == (
        {"KafkaSource"} if kafka else {"OtlpHttpSource", "OtlpGrpcSource"}
    )


def test_periodic_ticks_until_stopped_and_stopping_twice_is_harmless() -> None:
    ticks: list[int] = []

    async def tick() -> None:
        ticks.append(1)

    async def scenario() -> int:
        periodic = Periodic("test", 0.01, tick)
        periodic.start()
        periodic.start()  # one loop, however often started
        while len(ticks) < 3:
            await asyncio.sleep(0.01)
        await periodic.stop()
        seen = len(ticks)
        await asyncio.sleep(0.05)
        await periodic.stop()
        assert not periodic.running
        return seen

    seen = asyncio.run(scenario())
    assert len(ticks) == seen >= 3


def test_a_component_in_several_roles_starts_and_stops_once() -> None:
    log: list[str] = []

    class Both(Watcher):
        async def export(self, evaluated: Evaluated) -> None: ...

    both = Both("both", log)
    route = Route("main", Scorer(0.5), [both], sampler=RuleSampler(RateTable(1.0, {}, {})), observers=[both])

    async def scenario() -> None:
        pipeline = _pipeline({"main": route})
        await pipeline.start()
        await pipeline.shutdown(1.0)

    asyncio.run(scenario())
    assert [entry for entry in log if entry.endswith(("start", "shutdown"))] == [
        "both.start",
        "both.shutdown",
    ]
