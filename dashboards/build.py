"""ragpulse's Grafana dashboards, built as code with Grafana's foundation SDK.

The JSON files beside this script are generated from it and committed; never edit them by hand:

    python dashboards/build.py          # rewrite dashboards/*.json
    python dashboards/build.py --check  # exit 1 if they differ (a test does this)

Three dashboards: quality (score means against their alert thresholds, score distribution, drift,
and the retrieval signals measured on every interaction without a judge),
judges (calls, latency, errors, cache, tokens, cost) and pipeline (spans in, sampling, lag, dead
letters, queue, oldest unfinished). The datasource, service, route and metric are template
variables. Panels read the recording rules of deploy/prometheus/rules/ragpulse.rules.yml where one
exists, so a dashboard shows exactly what the alerts see.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import heatmap, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dash_model
from grafana_foundation_sdk.models import heatmap as heatmap_model
from grafana_foundation_sdk.models import prometheus as prom_model

HERE = Path(__file__).resolve().parent
DATASOURCE = dash_model.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Label matchers every quality query carries; "All" is ".*" so the regex matchers stay valid.
SCORE_FILTER = 'service=~"$service",route=~"$route",metric=~"$metric"'
ROUTE_FILTER = 'service=~"$service",route=~"$route"'
QUALITY_ALERTS = (
    "RagpulseQualityBelowBaseline|RagpulseQualityBelowThreshold|RagpulseQualityDrift"
    "|RagpulseQualityWeekOverWeekDrop"
)
SIGNAL_ALERTS = "RagpulseSignalDrift|RagpulseEmptyRetrievals|RagpulseRefusalsRising"


def query(expr: str, legend: str = "__auto", ref: str = "A") -> prom.Dataquery:
    return prom.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)


def _variables(*, quality: bool) -> list[Any]:
    def label_values(name: str, label: str, selector: str) -> dash.QueryVariable:
        return (
            dash.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(f"label_values({selector}, {name})")
            .refresh(dash_model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dash_model.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )

    variables: list[Any] = [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        label_values("service", "Service", "ragpulse_interactions_total"),
        label_values("route", "Route", 'ragpulse_interactions_total{service=~"$service"}'),
    ]
    if quality:
        variables.append(label_values("metric", "Metric", "ragpulse_score_count"))
    return variables


def _base(uid: str, title: str, description: str, *, quality: bool = False) -> dash.Dashboard:
    board = (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["ragpulse"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone(common.TimeZoneBrowser)
        .tooltip(dash_model.DashboardCursorSync.CROSSHAIR)
        .link(
            dash.DashboardLink("ragpulse dashboards")
            .type(dash_model.DashboardLinkType.DASHBOARDS)
            .tags(["ragpulse"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for variable in _variables(quality=quality):
        board = board.with_variable(variable)
    return board


def _drift_state(title: str, description: str, target: Any) -> statetimeline.Panel:
    """A drift detector's 0/1 gauge over time, read as stable / drift."""
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .height(8)
        .span(12)
        .datasource(DATASOURCE)
        .with_target(target)
        .mappings(
            [
                dash_model.ValueMap(
                    options={
                        "0": dash_model.ValueMappingResult(text="stable", color="green"),
                        "1": dash_model.ValueMappingResult(text="drift", color="red"),
                    }
                )
            ]
        )
    )


def _series(title: str, unit: str, *queries: prom.Dataquery, description: str = "") -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).description(description).height(8).span(12)
    panel = panel.datasource(DATASOURCE).fill_opacity(10).line_width(1)
    for q in queries:
        panel = panel.with_target(q)
    return panel


def _stat(title: str, unit: str, expr: str, description: str = "") -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .unit(unit)
        .description(description)
        .height(4)
        .span(6)
        .datasource(DATASOURCE)
        .with_target(query(expr, legend=title))
    )


def _dashed() -> list[dash_model.DynamicConfigValue]:
    """Field overrides that draw a series as a dashed red line (a threshold, an alert level)."""
    return [
        dash_model.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "red"}),
        dash_model.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
        dash_model.DynamicConfigValue(id_val="custom.fillBelowTo", value=""),
        dash_model.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
    ]


def _route_mean(family: str) -> str:
    """rate(sum) / rate(count) of a per-interaction histogram, pooled across replicas."""
    return (
        f"sum by (service, route) (rate({family}_sum{{{ROUTE_FILTER}}}[$__rate_interval]))\n"
        f"/ sum by (service, route) (rate({family}_count{{{ROUTE_FILTER}}}[$__rate_interval]))"
    )


def _route_quantile(q: float, family: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (le, service, route) "
        f"(rate({family}_bucket{{{ROUTE_FILTER}}}[$__rate_interval])))"
    )


def _share_panel(title: str, family: str, floor: float, description: str) -> timeseries.Panel:
    """A share of interactions (recording rule, 10m) against the level its alert fires above."""
    share = f"service_route:{family}:ratio_rate"
    return (
        _series(
            title,
            "percentunit",
            query(f"{share}10m{{{ROUTE_FILTER}}}", "{{service}} {{route}}"),
            query(
                f"clamp_min(3 * {share}1d{{{ROUTE_FILTER}}} offset 10m, {floor})",
                "{{service}} {{route}} alert level",
                "B",
            ),
            description=description,
        )
        .min(0)
        .override_by_regexp(".* alert level$", _dashed())
    )


SIGNALS_ROW = "Retrieval signals (every interaction, no judge)"


def signal_panels() -> list[Any]:
    """Panels of the signals measured on every interaction, before sampling, without a judge."""
    where = "{{service}} {{route}}"
    retrieval_means = _series(
        "Retrieval score: top-1 and mean of the chunks",
        "none",
        query(_route_mean("ragpulse_retrieval_top_score"), f"{where} top-1"),
        query(_route_mean("ragpulse_retrieval_mean_score"), f"{where} mean of chunks", "B"),
        description="The score the app's retriever gave its first chunk, and the mean over the chunks "
        "that carry one, averaged per interaction (rate(sum)/rate(count)); only interactions whose "
        "spans carry scores. The scale is the retriever's (similarity, distance or BM25): read a "
        "step, either way, not a level. A changed embedding model or index moves it first.",
    )
    top_quantiles = _series(
        "Top-1 retrieval score p10 / p50 / p90, and the traces behind it",
        "none",
        query(_route_quantile(0.5, "ragpulse_retrieval_top_score"), f"p50 {where}").exemplar(True),
        query(_route_quantile(0.1, "ragpulse_retrieval_top_score"), f"p10 {where}", "B"),
        query(_route_quantile(0.9, "ragpulse_retrieval_top_score"), f"p90 {where}", "C"),
        description="Quantiles of the top-1 score from the histogram (buckets 0.25, 0.5 to 1 by 0.1, "
        "then 5 and 50); the dots are exemplars: the trace id of an interaction in each bucket.",
    )
    given_none = (
        f'sum by (service, route) (rate(ragpulse_retrieved_chunks_bucket{{{ROUTE_FILTER},le=~"0|0.0"}}'
        "[$__rate_interval]))\n"
        "/ sum by (service, route) "
        f"(rate(ragpulse_retrieved_chunks_count{{{ROUTE_FILTER}}}[$__rate_interval]))"
    )
    chunks = (
        _series(
            "Chunks given to the answer, and the share given none",
            "short",
            query(_route_mean("ragpulse_retrieved_chunks"), f"{where} mean"),
            query(given_none, f"{where} given none", "B").exemplar(True),
            description="Mean chunks retrieved per interaction (left axis): a fall means a top-k, "
            "filter or index change. Right axis: the share of answers given no chunk (empty "
            "retrievals, and answers that did not search); its dots are exemplars, the trace of "
            "the newest such answer.",
        )
        .min(0)
        .override_by_regexp(
            ".* given none$",
            [
                dash_model.DynamicConfigValue(id_val="unit", value="percentunit"),
                dash_model.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
            ],
        )
    )
    sizes = _series(
        "Context and response size (characters), mean",
        "short",
        query(_route_mean("ragpulse_context_characters"), f"context {where}"),
        query(_route_mean("ragpulse_response_characters"), f"response {where}", "B"),
        description="Mean characters per interaction: a chunking change moves the context size; a "
        "prompt or model change the response size.",
    ).min(0)
    empty = _share_panel(
        "Empty retrievals (share of interactions, 10m)",
        "ragpulse_empty_retrievals",
        0.05,
        "Interactions whose retrieval returned no chunk at all: never scored by a judge, so only "
        "this sees them. Dashed: the level RagpulseEmptyRetrievals fires above (3 times the share "
        "over the day before, at least 5%).",
    )
    refusals = _share_panel(
        "Refusals (share of interactions, 10m)",
        "ragpulse_refusals",
        0.1,
        "Answers that say they do not know or cannot answer from the context (docs/metrics.md). "
        "Dashed: the level RagpulseRefusalsRising fires above (3 times the share over the day "
        "before, at least 10%).",
    )
    overlap = (
        _series(
            "Answer-context overlap",
            "percentunit",
            query(_route_mean("ragpulse_response_context_overlap"), f"{where} mean"),
            query(_route_quantile(0.1, "ragpulse_response_context_overlap"), f"{where} p10", "B").exemplar(
                True
            ),
            description="Share of the response's content words found in the context (above a CPU "
            "cap per second, on a uniform share of interactions). A fall means answers leave the "
            "context; the p10 exemplars lead to the traces of the least grounded answers.",
        )
        .min(0)
        .max(1)
    )
    drift_state = _drift_state(
        "Signal drift detected",
        "1 while the agent's drift detector (the one on the judged scores) confirms a shift of a "
        "signal: retrieval_top_score (either way), retrieval_hit, answered, overlap (drops).",
        query(
            f"max by (service, route, signal) (ragpulse_signal_drift_detected{{{ROUTE_FILTER}}})",
            "{{service}} {{route}} {{signal}}",
        ),
    )
    drift_score = _series(
        "Signal drift evidence (CUSUM over its threshold)",
        "none",
        query(
            f"max by (service, route, signal) (ragpulse_signal_drift_score{{{ROUTE_FILTER}}})",
            "{{service}} {{route}} {{signal}}",
        ),
        description="0 while a signal sits at its baseline; 1 at the alarm threshold. "
        "RagpulseSignalDrift fires when a confirmed shift holds for 5m.",
    ).min(0)
    return [
        drift_state,
        drift_score,
        retrieval_means,
        top_quantiles,
        empty,
        refusals,
        chunks,
        sizes,
        overlap.span(24),
    ]


def quality() -> dash.Dashboard:
    mean = (
        _series(
            "Mean $metric (5m) against its alert threshold",
            "percentunit",
            query(
                f'service_route_metric:ragpulse_score:mean5m{{{ROUTE_FILTER},metric="$metric"}}',
                "{{service}} {{route}}",
            ),
            query(
                f'service_route_metric:ragpulse_quality_threshold:effective{{{ROUTE_FILTER},metric="$metric"}}',
                "{{service}} {{route}} threshold",
                "B",
            ),
            description="rate(sum)/rate(count) of ragpulse_score across replicas; the dashed red lines "
            "are the thresholds the agents export (alert_thresholds, per metric or per service; "
            "opt-in, none by default: RagpulseQualityBelowBaseline compares each series with its "
            "own day before). "
            "RagpulseQualityBelowThreshold fires when a mean stays below its threshold for 15m on "
            "at least 20 scores in 5m.",
        )
        .min(0)
        .max(1)
        .repeat("metric")
        .repeat_direction("h")
        .max_per_row(2)
        .override_by_regexp(".* threshold$", _dashed())
    )
    week = (
        _series(
            "1h mean against the same hour a week earlier",
            "percentunit",
            query(
                f"service_route_metric:ragpulse_score:mean1h{{{SCORE_FILTER}}}",
                "{{service}} {{route}} {{metric}}",
            ),
            query(
                f"service_route_metric:ragpulse_score:mean1h{{{SCORE_FILTER}}} offset 1w",
                "{{service}} {{route}} {{metric}} a week earlier",
                "B",
            ),
            description="RagpulseQualityWeekOverWeekDrop fires when the 1h mean falls more than 0.1 below "
            "the same hour a week earlier.",
        )
        .min(0)
        .max(1)
    )
    distribution = (
        heatmap.Panel()
        .title("Score distribution")
        .description("Scored interactions per score bucket (ragpulse_score histogram).")
        .height(8)
        .span(12)
        .datasource(DATASOURCE)
        .with_target(
            query(
                f"sum by (le) (increase(ragpulse_score_bucket{{{SCORE_FILTER}}}[$__rate_interval]))",
                "{{le}}",
            ).format(prom_model.PromQueryFormat.HEATMAP)
        )
        .calculate(False)
        .color(heatmap.HeatmapColorOptions().mode(heatmap_model.HeatmapColorMode.SCHEME).scheme("Oranges"))
        .y_axis(heatmap.YAxisConfig().unit("percentunit"))
    )
    drift_state = _drift_state(
        "Drift detected",
        "1 while the agent's drift detector confirms a drop below the learnt baseline.",
        query(
            f"max by (service, route, metric) (ragpulse_drift_detected{{{SCORE_FILTER}}})",
            "{{service}} {{route}} {{metric}}",
        ),
    )
    drift_score = _series(
        "Drift evidence (CUSUM over its threshold)",
        "none",
        query(
            f"max by (service, route, metric) (ragpulse_drift_score{{{SCORE_FILTER}}})",
            "{{service}} {{route}} {{metric}}",
        ),
        description="0 while scores sit at or above baseline; 1 at the alarm threshold (capped at 2).",
    ).min(0)
    # Exemplars: each dot is one scored interaction, its trace id a link to the trace (Tempo in
    # the compose stack, through the Prometheus data source's exemplarTraceIdDestinations).
    traces = (
        _series(
            "Low scores and the traces behind them",
            "percentunit",
            query(
                f"histogram_quantile(0.1, sum by (le, metric) "
                f"(rate(ragpulse_score_bucket{{{SCORE_FILTER}}}[$__rate_interval])))",
                "p10 {{metric}}",
            ).exemplar(True),
            description="The 10th percentile score per metric; the dots are exemplars (the trace id of a "
            "scored interaction in each bucket): click one to open its trace.",
        )
        .min(0)
        .max(1)
    )
    documents = (
        table.Panel()
        .title("Documents behind low scores")
        .description(
            "Per service, the documents (by the documents_key metadata value such as their source "
            "when it is set, else chunk id, else a hash of its text) most often retrieved and judged "
            "useless for the answer or irrelevant to the question, and most often useful: the top "
            "documents_top_n of each (ragpulse_document_verdicts, a bounded space-saving summary)."
        )
        .height(10)
        .span(24)
        .datasource(DATASOURCE)
        .with_target(
            query(
                "topk(20, max by (service, verdict, document) "
                '(ragpulse_document_verdicts{service=~"$service"}))',
                "{{document}}",
            )
            .instant()
            .format(prom_model.PromQueryFormat.TABLE)
        )
        .sort_by([common_builders.TableSortByFieldState().display_name("Value").desc(True)])
    )
    volume = _series(
        "Scored interactions per second",
        "ops",
        query(
            f"sum by (service, route, metric) "
            f"(rate(ragpulse_score_count{{{SCORE_FILTER}}}[$__rate_interval]))",
            "{{service}} {{route}} {{metric}}",
        ),
        description="Means over few scores are noise: the quality alert needs 20 scores in 5m.",
    )
    outcomes = _series(
        "Evaluation outcomes per second",
        "ops",
        query(
            f"sum by (metric, outcome) "
            f"(rate(ragpulse_evaluations_total{{{SCORE_FILTER}}}[$__rate_interval]))",
            "{{metric}} {{outcome}}",
        ),
        description="ok: scored; skipped: undefined (no chunks, no claims), never a 0; "
        "error: the judge failed.",
    )
    alert_annotation = (
        dash.AnnotationQuery()
        .name("Quality alerts")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("red")
        .expr(
            f'ALERTS{{alertname=~"{QUALITY_ALERTS}",alertstate="firing",{SCORE_FILTER}}}\n'
            f'or ALERTS{{alertname=~"{SIGNAL_ALERTS}",alertstate="firing",{ROUTE_FILTER}}}'
        )
    )
    # Golden probes and the judge canary (docs/probes.md): series apart from production's.
    probe_scores = _series(
        "Probe mean score per set and metric (30m)",
        "percentunit",
        query(
            "sum by (probe_set, metric) (increase(ragpulse_probe_score_sum[30m]))\n"
            "  / sum by (probe_set, metric) (increase(ragpulse_probe_score_count[30m]))",
            legend="{{probe_set}} {{metric}}",
        ),
        description="Golden probes scored against their reference (context_recall, answer_correctness, "
        "rank metrics), every round whatever the traffic and sampling.",
    )
    probe_items = _series(
        "Probe items and failures per round (30m)",
        "short",
        query("sum by (probe_set, outcome) (increase(ragpulse_probe_items_total[30m]))",
              legend="{{probe_set}} {{outcome}}"),
        query("sum by (probe_set, reason) (increase(ragpulse_probe_failures_total[30m]))",
              legend="{{probe_set}} not scored: {{reason}}", ref="B"),
        description="Items that passed or failed probes_pass_score, and those not scored by reason.",
    )  # fmt: skip
    canary_agreement = _series(
        "Judge canary: agreement with human labels",
        "short",
        query("ragpulse_canary_agreement", legend="{{metric}} {{statistic}}"),
        description="AUROC and balanced accuracy of the judge on the frozen labelled set, per run.",
    )
    canary_shift = _series(
        "Judge canary: mean shift against the accepted run",
        "short",
        query("ragpulse_canary_mean_shift", legend="{{metric}}"),
        query("ragpulse_canary_judge_moved", legend="judge moved", ref="B"),
        description="A judge that moves here while the probes stay put changed by itself.",
    )
    board = (
        _base(
            "ragpulse-quality",
            "ragpulse / Quality",
            "Retrieval and answer quality per service, route and metric: means against their alert "
            "thresholds, score distribution, drift, and the retrieval signals measured on every "
            "interaction without a judge.",
            quality=True,
        )
        .annotation(alert_annotation)
        .with_row(dash.Row("Means against thresholds"))
        .with_panel(mean)
        .with_row(dash.Row("Drift"))
        .with_panel(drift_state)
        .with_panel(drift_score)
        .with_panel(week)
        .with_panel(distribution)
        .with_panel(traces)
        .with_row(dash.Row(SIGNALS_ROW))
    )
    for panel in signal_panels():
        board = board.with_panel(panel)
    return (
        board.with_row(dash.Row("Documents"))
        .with_panel(documents)
        .with_row(dash.Row("Volume"))
        .with_panel(volume)
        .with_panel(outcomes)
        .with_row(dash.Row("Probes and the judge canary"))
        .with_panel(probe_scores)
        .with_panel(probe_items)
        .with_panel(canary_agreement)
        .with_panel(canary_shift)
    )


def judges() -> dash.Dashboard:
    return (
        _base(
            "ragpulse-judges",
            "ragpulse / Judges",
            "Judge calls, latency, errors, verdict cache, tokens and cost.",
        )
        .with_row(dash.Row("Calls"))
        .with_panel(
            _stat(
                "Judge error ratio (5m)",
                "percentunit",
                "max(model:ragpulse_judge_requests:error_ratio_rate5m)",
            )
        )
        .with_panel(
            _stat("Cache hit ratio (5m)", "percentunit", "avg(job:ragpulse_judge_cache_hits:ratio_rate5m)")
        )
        .with_panel(_stat("Cost, last hour", "currencyUSD", "sum(model:ragpulse_judge_cost_usd:increase1h)"))
        .with_panel(_stat("Budget exhausted", "bool", "max(ragpulse_judge_budget_exhausted)"))
        .with_panel(
            _series(
                "Judge calls per second",
                "reqps",
                query(
                    "sum by (model, outcome) (rate(ragpulse_judge_requests_total[$__rate_interval]))",
                    "{{model}} {{outcome}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Judge latency",
                "s",
                query(
                    "histogram_quantile(0.5, sum by (model, le) "
                    "(rate(ragpulse_judge_latency_seconds_bucket[$__rate_interval])))",
                    "{{model}} p50",
                ),
                query(
                    "histogram_quantile(0.95, sum by (model, le) "
                    "(rate(ragpulse_judge_latency_seconds_bucket[$__rate_interval])))",
                    "{{model}} p95",
                    "B",
                ),
            )
        )
        .with_panel(
            _series(
                "Judge error ratio",
                "percentunit",
                query("model:ragpulse_judge_requests:error_ratio_rate5m", "{{model}}"),
                description="RagpulseJudgeErrors fires above 10% on at least 20 calls in 5m.",
            ).min(0)
        )
        .with_panel(
            _series(
                "Verdict cache",
                "percentunit",
                query("job:ragpulse_judge_cache_hits:ratio_rate5m", "hit ratio"),
                description="Only cache misses are sent to the judge.",
            )
            .min(0)
            .max(1)
        )
        .with_row(dash.Row("Usage and cost"))
        .with_panel(
            _series(
                "Tokens per second",
                "short",
                query(
                    "sum by (model, kind) (rate(ragpulse_judge_tokens_total[$__rate_interval]))",
                    "{{model}} {{kind}}",
                ),
            )
        )
        .with_panel(
            _series(
                "Cost per hour (USD)",
                "currencyUSD",
                query("model:ragpulse_judge_cost_usd:increase1h", "{{model}}"),
                query(
                    "sum by (model) (rate(ragpulse_judge_unpriced_calls_total[$__rate_interval])) * 3600",
                    "{{model}} unpriced calls per hour",
                    "B",
                ),
                description="As litellm prices it; calls it has no price for are counted apart.",
            )
        )
        .with_panel(
            _series(
                "Verdict cache errors per second",
                "ops",
                query(
                    "sum by (operation) (rate(ragpulse_judge_cache_errors_total[$__rate_interval]))",
                    "{{operation}}",
                ),
                description="Redis operations that failed; evaluation went on uncached.",
            )
        )
    )


def pipeline() -> dash.Dashboard:
    return (
        _base(
            "ragpulse-pipeline",
            "ragpulse / Pipeline",
            "Spans in, assembly, sampling, Kafka lag, dead letters, evaluation queue.",
        )
        .with_row(dash.Row("Health"))
        .with_panel(_stat("Agents up", "none", 'sum(up{job="ragpulse"})'))
        .with_panel(_stat("Evaluation queue", "none", "sum(ragpulse_evaluation_queue_depth)"))
        .with_panel(_stat("Oldest unfinished", "s", "max(ragpulse_oldest_unfinished_seconds)"))
        .with_panel(_stat("Consumer lag", "short", "sum(topic:ragpulse_consumer_lag:sum)"))
        .with_row(dash.Row("Intake"))
        .with_panel(
            _series(
                "Spans received per second",
                "ops",
                query(
                    "sum by (source) (rate(ragpulse_spans_received_total[$__rate_interval]))", "{{source}}"
                ),
                query(
                    "sum by (reason) (rate(ragpulse_spans_skipped_total[$__rate_interval]))",
                    "skipped: {{reason}}",
                    "B",
                ),
            )
        )
        .with_panel(
            _series(
                "Interactions per second",
                "ops",
                query(
                    f"sum by (service, route) "
                    f"(rate(ragpulse_interactions_total{{{ROUTE_FILTER}}}[$__rate_interval]))",
                    "{{service}} {{route}}",
                ),
                query(
                    f"sum by (service, route) "
                    f"(rate(ragpulse_interactions_sampled_total{{{ROUTE_FILTER}}}[$__rate_interval]))",
                    "{{service}} {{route}} sampled",
                    "B",
                ),
            )
        )
        .with_panel(
            _series(
                "Evaluated share of traffic",
                "percentunit",
                query(
                    f"service_route:ragpulse_interactions_sampled:ratio_rate5m{{{ROUTE_FILTER}}}",
                    "{{service}} {{route}}",
                ),
                query(
                    'max by (service) (ragpulse_sample_ratio{service=~"$service"})', "{{service}} rate", "B"
                ),
                description="Lowered by per-service rates and by the judge budget.",
            )
            .min(0)
            .max(1)
        )
        .with_panel(
            _series(
                "Refused requests and dead letters per second",
                "ops",
                query(
                    "sum by (source, reason) (rate(ragpulse_requests_refused_total[$__rate_interval]))",
                    "refused {{source}} {{reason}}",
                ),
                query(
                    "sum by (reason) (rate(ragpulse_dead_letters_total[$__rate_interval]))",
                    "dead letter {{reason}}",
                    "B",
                ),
            )
        )
        .with_row(dash.Row("Agents"))
        .with_panel(
            _series(
                "Searches per answer",
                "short",
                query(
                    f"sum by (service, route) "
                    f"(rate(ragpulse_agent_searches_sum{{{ROUTE_FILTER}}}[$__rate_interval]))\n"
                    f"/ sum by (service, route) "
                    f"(rate(ragpulse_agent_searches_count{{{ROUTE_FILTER}}}[$__rate_interval]))",
                    "{{service}} {{route}}",
                ),
                description="Mean searches (retrievals, search-tool calls) behind each answer, on every "
                "interaction before sampling: a jump means the agent searches again and again.",
            ).min(0)
        )
        .with_panel(
            _series(
                "Empty searches and tool errors per second",
                "ops",
                query(
                    f"sum by (service, route) "
                    f"(rate(ragpulse_agent_empty_searches_total{{{ROUTE_FILTER}}}[$__rate_interval]))",
                    "{{service}} {{route}} empty",
                ),
                query(
                    f"sum by (service, route) "
                    f"(rate(ragpulse_agent_tool_errors_total{{{ROUTE_FILTER}}}[$__rate_interval]))",
                    "{{service}} {{route}} tool errors",
                    "B",
                ),
                description="Searches that returned nothing and failed tool calls before sampling..",
            )
        )
        .with_row(dash.Row("Backlog"))
        .with_panel(
            _series(
                "Kafka consumer lag",
                "short",
                query("max by (topic, partition) (ragpulse_consumer_lag)", "{{topic}}/{{partition}}"),
                description="High watermark minus committed offset; RagpulseConsumerLagGrowing fires when "
                "it exceeds 1000 and keeps growing for 15m.",
            )
        )
        .with_panel(
            _series(
                "Evaluation queue and assembler buffer",
                "short",
                query("sum(ragpulse_evaluation_queue_depth)", "queued for evaluation"),
                query("sum(ragpulse_assembler_buffered_traces)", "traces waiting for their spans", "B"),
            )
        )
        .with_panel(
            _series(
                "Oldest unfinished interaction",
                "s",
                query("max by (instance) (ragpulse_oldest_unfinished_seconds)", "{{instance}}"),
                description="RagpulseEvaluationBacklogStale fires above 15m.",
            )
        )
        .with_panel(
            _series(
                "Intake paused",
                "bool",
                query("max by (reason) (ragpulse_intake_paused)", "{{reason}}"),
                query("sum(ragpulse_kafka_assigned_partitions)", "assigned partitions", "B"),
            )
        )
    )


DASHBOARDS = {"quality": quality, "judges": judges, "pipeline": pipeline}


def render(name: str) -> str:
    board = DASHBOARDS[name]().build()
    return JSONEncoder(sort_keys=True, indent=2).encode(board) + "\n"


def outputs() -> dict[Path, str]:
    return {HERE / f"ragpulse-{name}.json": render(name) for name in DASHBOARDS}


def expressions(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every panel target and annotation of a dashboard's JSON."""
    for panel in board.get("panels", []):
        for child in [panel, *panel.get("panels", [])]:
            for target in child.get("targets", []):
                yield child.get("title", ""), target["expr"]
    for annotation in board.get("annotations", {}).get("list", []):
        if "expr" in annotation:
            yield f"annotation {annotation['name']}", annotation["expr"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed JSON differs")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.write_text(text)
    for path in stale:
        print(f"{path.name} is out of date: run python dashboards/build.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
