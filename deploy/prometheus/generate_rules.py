"""Prometheus recording and alert rules for ragpulse, as code.

The committed rule files are generated from this module, never edited by hand:

    python deploy/prometheus/generate_rules.py          # rewrite the files
    python deploy/prometheus/generate_rules.py --check  # exit 1 if they differ (a test does this)

It writes `deploy/prometheus/rules/ragpulse.rules.yml` (loaded by Prometheus, unit-tested by
`ragpulse.rules.test.yml` with promtool) and `deploy/k8s/prometheusrule.yaml` (the same groups as
a prometheus-operator PrometheusRule).

Quality alerts fit the judge (docs/runbooks.md): by default a series is compared with itself, its
1h mean with its own mean over the day before (`RagpulseQualityBelowBaseline`), which means the
same under any judge; plus the agent's drift detector (`RagpulseQualityDrift`). Absolute
thresholds (`RagpulseQualityBelowThreshold`) are opt-in: they are not in the rules but in each
agent's `alert_thresholds` setting, exported as `ragpulse_quality_threshold{metric}`, and the rules
compare against it (falling back to DEFAULT_THRESHOLDS below, empty: no threshold, no alert).
These are per series (service, route, metric) and `warning`s: the page is one per service,
`RagpulseServiceQualityDegraded`, which lists the routes and metrics whose series alert fires and
which Alertmanager uses to mute them (one regression moved 20 series of the demo at once). The
other knobs are `RuleParams`, settable with `--set name=value`. Tests generate a copy with every
`for:` shortened (`for_override`) so that a real Prometheus fires the same rules in seconds.

Scores are averaged as rate(sum) / rate(count) of the `ragpulse_score` histogram summed across
replicas, never as an average of per-replica averages (which would weight a quiet replica like a
busy one).

The signals measured on every interaction without a judge (docs/metrics.md) follow the same
policy: `RagpulseSignalDrift` is the agent's drift detector on them, and the shares of empty
retrievals and of refusals alert relative to the same route's share over the day before
(`RagpulseEmptyRetrievals`, `RagpulseRefusalsRising`), never on an absolute level alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "deploy/prometheus/rules/ragpulse.rules.yml"
K8S_RULE_FILE = ROOT / "deploy/k8s/prometheusrule.yaml"

# Must match agent.config.DEFAULT_ALERT_THRESHOLDS (a test checks): the fallback used while no
# agent exports ragpulse_quality_threshold. Empty: an absolute threshold means nothing across
# judges (the local judge's healthy context relevancy is about 0.2, an LLM judge's near 0.8), so
# absolute thresholds are opt-in and the default quality alert is relative to the baseline.
DEFAULT_THRESHOLDS: dict[str, float] = {}

SCORE_KEY = "service, route, metric"
ROUTE_KEY = "service, route"


@dataclass(frozen=True)
class RuleParams:
    """Everything an operator may tune in the rules (quality thresholds live in the agent)."""

    job: str = "ragpulse"
    runbook_base: str = "https://github.com/ragpulse/ragpulse/blob/main/docs/runbooks.md"
    # A mean over fewer scored interactions than this cannot page (a trickle is noise).
    min_evaluations_5m: int = 20
    min_evaluations_1h: int = 100
    quality_for: str = "15m"
    # RagpulseQualityBelowBaseline: the mean over `baseline_recent` has fallen below
    # (1 - baseline_drop) times the same series' mean over the `baseline_history` before it, on at
    # least min_evaluations_1h and min_evaluations_baseline scores. A ratio, so that the judge's
    # scale cancels; 0.2 is 4 standard errors at 100 scores for a score whose sd is up to half its
    # mean, and 1.8x the largest drop of healthy demo traffic (docs/runbooks.md).
    baseline_drop: float = 0.20
    baseline_recent: str = "1h"
    baseline_history: str = "1d"
    min_evaluations_baseline: int = 500
    baseline_for: str = "10m"
    drift_for: str = "5m"
    week_drop: float = 0.10
    week_drop_for: str = "30m"
    judge_error_ratio: float = 0.10
    judge_min_calls_5m: int = 20
    judge_errors_for: str = "10m"
    budget_for: str = "15m"
    lag_messages: int = 1000
    lag_for: str = "15m"
    dead_letters_10m: int = 10
    dead_letters_for: str = "5m"
    stalled_for: str = "10m"
    oldest_unfinished_seconds: int = 900
    oldest_unfinished_for: str = "5m"
    down_for: str = "2m"
    absent_for: str = "5m"
    # Trust (docs/trust.md): the objective the label-corrected faithfulness estimate is held to.
    trust_objective: float = 0.8
    trust_may_be_below_for: str = "30m"
    trust_below_for: str = "15m"
    # Golden probes (docs/probes.md): the share of probe items failing over `probe_window` (two
    # rounds at the default probes_interval_seconds of 15m), and probes gone quiet.
    probe_window: str = "30m"
    probe_fail_ratio: float = 0.2
    probe_for: str = "5m"
    probe_failures_for: str = "5m"
    probe_silent_window: str = "1h"
    probe_silent_for: str = "15m"
    # The judge canary (daily by default): stale when no run finished for this long.
    canary_stale_seconds: int = 2 * 86400
    # Signals on every interaction, no judge (docs/runbooks.md, "Signals"). The share of empty
    # retrievals (and of refusals) over `signal_recent` alerts when it is above `signal_rise`
    # times the same route's share over the `signal_history` before it and above its floor, on at
    # least signal_min_interactions_recent and signal_min_interactions_history interactions: at
    # the minimum of 200, the case closest to noise (a usual share of floor/rise) is 3.7 standard
    # errors for the 5% floor, 5.2 for the 10% one, and `for:` asks it of two disjoint windows.
    signal_recent: str = "10m"
    signal_history: str = "1d"
    signal_rise: float = 3.0
    signal_min_interactions_recent: int = 200
    signal_min_interactions_history: int = 2000
    empty_retrievals_floor: float = 0.05
    empty_retrievals_for: str = "15m"
    refusals_floor: float = 0.10
    refusals_for: str = "15m"
    signal_drift_for: str = "5m"
    # Tests only: replaces every `for:` so a real Prometheus fires the same rules in seconds.
    for_override: str | None = None


def _mean(window: str) -> dict[str, str]:
    return {
        "record": f"service_route_metric:ragpulse_score:mean{window}",
        "expr": f"sum by ({SCORE_KEY}) (rate(ragpulse_score_sum[{window}]))\n"
        f"/\nsum by ({SCORE_KEY}) (rate(ragpulse_score_count[{window}]))",
    }


def _count(window: str) -> dict[str, str]:
    return {
        "record": f"service_route_metric:ragpulse_score_count:increase{window}",
        "expr": f"sum by ({SCORE_KEY}) (increase(ragpulse_score_count[{window}]))",
    }


def _thresholds() -> list[dict[str, str]]:
    """The threshold of every scored series: its service's own, else its metric's, else the default.

    Agents export `ragpulse_quality_threshold{metric}` for every service and
    `ragpulse_quality_threshold{service,metric}` for one; max: while replicas disagree (a
    rollout), the stricter threshold wins.
    """
    fallbacks = "".join(
        f'\nor label_replace(vector({value}), "metric", "{metric}", "", "")'
        for metric, value in DEFAULT_THRESHOLDS.items()
    )
    # `count * 0 +` gives the threshold the labels of each series that has scores in 5m.
    scored = "0 * service_route_metric:ragpulse_score_count:increase5m"
    per_service, per_metric = (
        "service_metric:ragpulse_quality_threshold:max",
        "metric:ragpulse_quality_threshold:max",
    )
    return [
        {
            "record": "metric:ragpulse_quality_threshold:max",
            "expr": f'max by (metric) (ragpulse_quality_threshold{{service=""}}){fallbacks}',
        },
        {
            "record": "service_metric:ragpulse_quality_threshold:max",
            "expr": 'max by (service, metric) (ragpulse_quality_threshold{service!=""})',
        },
        {
            "record": "service_route_metric:ragpulse_quality_threshold:effective",
            "expr": f"{scored}\n  + on (service, metric) group_left () {per_service}\n"
            f"or\n{scored}\n  + on (metric) group_left () {per_metric}",
        },
    ]


def _windows(*windows: str) -> list[str]:
    return list(dict.fromkeys(windows))


def recording_rules(p: RuleParams) -> list[dict[str, str]]:
    judge = "ragpulse_judge_requests_total"
    baseline = (p.baseline_recent, p.baseline_history)
    return [
        *(_mean(window) for window in _windows("5m", "1h", "1d", *baseline)),
        *(_count(window) for window in _windows("5m", "1h", *baseline)),
        *_thresholds(),
        {
            "record": "model:ragpulse_judge_requests:error_ratio_rate5m",
            # `or ... * 0`: a model with no failed call has ratio 0, not no data.
            "expr": f'(sum by (model) (rate({judge}{{outcome!="ok"}}[5m])) or sum by (model) '
            f"(rate({judge}[5m])) * 0)\n/\nsum by (model) (rate({judge}[5m]))",
        },
        {
            "record": "job:ragpulse_judge_cache_hits:ratio_rate5m",
            "expr": "sum by (job) (rate(ragpulse_judge_cache_hits_total[5m]))\n/\n"
            "(sum by (job) (rate(ragpulse_judge_cache_hits_total[5m])) "
            "+ sum by (job) (rate(ragpulse_judge_cache_misses_total[5m])))",
        },
        {
            "record": "model:ragpulse_judge_cost_usd:increase1h",
            "expr": "sum by (model) (increase(ragpulse_judge_cost_usd_total[1h]))",
        },
        {
            "record": "service_route:ragpulse_interactions_sampled:ratio_rate5m",
            "expr": "(sum by (service, route) (rate(ragpulse_interactions_sampled_total[5m])) "
            "or sum by (service, route) (rate(ragpulse_interactions_total[5m])) * 0)\n/\n"
            "sum by (service, route) (rate(ragpulse_interactions_total[5m]))",
        },
        {
            # One owner per partition; max drops a stale value a replica may hold after a rebalance.
            "record": "topic:ragpulse_consumer_lag:sum",
            "expr": "sum by (topic) (max by (topic, partition) (ragpulse_consumer_lag))",
        },
    ]


def _series_value(series: str, number: str = "%.3f", offset: str = "") -> str:
    """A template that quotes `series` of the alert's service, route and metric."""
    at = f" offset {offset}" if offset else ""
    return (
        f'{{{{ with printf "{series}{{service=%q,route=%q,metric=%q}}{at}" '
        "$labels.service $labels.route $labels.metric | query }}"
        f'{{{{ . | first | value | printf "{number}" }}}}{{{{ end }}}}'
    )


def _quality_value(window: str, offset: str = "") -> str:
    return _series_value(f"service_route_metric:ragpulse_score:mean{window}", offset=offset)


_THRESHOLD_VALUE = (
    '{{ with printf "service_route_metric:ragpulse_quality_threshold:effective'
    '{service=%q,route=%q,metric=%q}" $labels.service $labels.route $labels.metric | query }}'
    '{{ . | first | value | printf "%.2f" }}{{ end }}'
)
_COUNT_5M = (
    '{{ with printf "service_route_metric:ragpulse_score_count:increase5m{service=%q,route=%q,metric=%q}" '
    "$labels.service $labels.route $labels.metric | query }}"
    '{{ . | first | value | printf "%.0f" }}{{ end }}'
)
_WHERE = "{{ $labels.metric }} of {{ $labels.service }} {{ $labels.route }}"


def _below_baseline(p: RuleParams) -> dict[str, Any]:
    recent, history = p.baseline_recent, p.baseline_history
    mean = "service_route_metric:ragpulse_score:mean"
    count = "service_route_metric:ragpulse_score_count:increase"
    ratio = round(1 - p.baseline_drop, 6)
    return {
        "alert": "RagpulseQualityBelowBaseline",
        # A baseline mean of 0 gives NaN or +Inf: nothing to fall from, quiet.
        "expr": f"(\n  {mean}{recent}\n  / on ({SCORE_KEY})\n  {mean}{history} offset {recent}\n"
        f") < {ratio}\n"
        f"and on ({SCORE_KEY})\n  {count}{recent} >= {p.min_evaluations_1h}\n"
        f"and on ({SCORE_KEY})\n  {count}{history} offset {recent} >= {p.min_evaluations_baseline}",
        "for": p.baseline_for,
        "severity": "warning",
        "summary": f"{_WHERE} fell below its own baseline",
        "description": f"The {recent} mean of {_WHERE} is {_quality_value(recent)}, "
        "{{ $value | humanizePercentage }} of its mean over the "
        f"{history} before ({_quality_value(history, offset=recent)}), over "
        f"{_series_value(count + recent, '%.0f')} scored interactions (alerting below "
        f"{ratio:.0%}, for {p.baseline_for}).",
    }


# The per-series quality alerts (one per service, route and metric) that the per-service page
# stands for; Alertmanager mutes them while it fires (deploy/alertmanager/alertmanager.yml).
SERIES_QUALITY_ALERTS = (
    "RagpulseQualityBelowBaseline",
    "RagpulseQualityBelowThreshold",
    "RagpulseQualityDrift",
)


def _firing_series(by: str, shown: str) -> str:
    """A template listing, comma-separated, the service's firing series alerts grouped `by` these
    labels, each shown as `shown` (a template over `$s.Labels`)."""
    names = "|".join(SERIES_QUALITY_ALERTS)
    # sortByLabel is stable: sorting by the last label first orders by the first, then the next.
    order = "".join(f' | sortByLabel "{label}"' for label in reversed(by.split(", ")))
    return (
        f'{{{{ range $i, $s := printf `count by ({by}) (ALERTS{{alertstate="firing",alertname=~"{names}",'
        f"service=%q}})` $labels.service | query{order} }}}}"
        f"{{{{ if $i }}}}, {{{{ end }}}}{shown}{{{{ end }}}}"
    )


_ROUTES = _firing_series("route", "{{ $s.Labels.route }}")
_METRICS = _firing_series("metric", "{{ $s.Labels.metric }}")
_SERIES = _firing_series(
    "metric, route, alertname", "{{ $s.Labels.metric }} of {{ $s.Labels.route }} ({{ $s.Labels.alertname }})"
)


def _service_quality() -> dict[str, Any]:
    """One page per service: a regression usually moves several routes and metrics at once, and
    each would otherwise page on its own (the demo's one regression raised 20 series). Built on the
    per-series alerts' own ALERTS series, so it fires exactly while one of them fires, with their
    `for:`; it is evaluated after them in the same group, at the same timestamp."""
    names = "|".join(SERIES_QUALITY_ALERTS)
    return {
        "alert": "RagpulseServiceQualityDegraded",
        "expr": f'count by (service) (ALERTS{{alertstate="firing",alertname=~"{names}"}})',
        "for": "0m",
        "severity": "critical",
        "summary": "Quality of {{ $labels.service }} dropped ({{ $value }} series)",
        "description": '{{ $value | printf "%.0f" }} quality series of {{ $labels.service }} alert on '
        f"routes {_ROUTES} and metrics {_METRICS}: {_SERIES}. Each is muted while this page fires; "
        "see them in Prometheus' alerts page or Alertmanager.",
        "routes": _ROUTES,
        "metrics": _METRICS,
    }


def alert_rules(p: RuleParams) -> list[dict[str, Any]]:
    score_key = SCORE_KEY
    alerts: list[dict[str, Any]] = [
        _below_baseline(p),
        {
            "alert": "RagpulseQualityBelowThreshold",
            "expr": "(\n  service_route_metric:ragpulse_score:mean5m\n"
            f"  < on ({score_key}) service_route_metric:ragpulse_quality_threshold:effective\n)\n"
            f"and on ({score_key})\n"
            f"  service_route_metric:ragpulse_score_count:increase5m >= {p.min_evaluations_5m}",
            "for": p.quality_for,
            "severity": "warning",
            "summary": f"{_WHERE} below its threshold",
            "description": f'The 5m mean of {_WHERE} is {{{{ $value | printf "%.3f" }}}}, below '
            f"the threshold {_THRESHOLD_VALUE}, over {_COUNT_5M} scored interactions, for "
            f"{p.quality_for}.",
        },
        {
            "alert": "RagpulseQualityDrift",
            "expr": f"max by ({score_key}) (ragpulse_drift_detected) == 1",
            "for": p.drift_for,
            "severity": "warning",
            "summary": f"{_WHERE} dropped below its baseline",
            "description": "The agent's drift detector (CUSUM confirmed by a window test) flags a "
            f"drop of {_WHERE} below its learnt baseline; the 5m mean is now {_quality_value('5m')} "
            "and the 1d mean {quality_1d}.".replace("{quality_1d}", _quality_value("1d")),
        },
        {
            "alert": "RagpulseQualityWeekOverWeekDrop",
            "expr": "(\n  service_route_metric:ragpulse_score:mean1h offset 1w\n"
            "  - service_route_metric:ragpulse_score:mean1h\n"
            f") > {p.week_drop}\n"
            f"and on ({score_key})\n"
            f"  service_route_metric:ragpulse_score_count:increase1h >= {p.min_evaluations_1h}\n"
            f"and on ({score_key})\n"
            f"  service_route_metric:ragpulse_score_count:increase1h offset 1w >= {p.min_evaluations_1h}",
            "for": p.week_drop_for,
            "severity": "warning",
            "summary": f"{_WHERE} is lower than the same hour a week ago",
            "description": f"The 1h mean of {_WHERE} is {_quality_value('1h')}, "
            f'{{{{ $value | printf "%.3f" }}}} below the same hour a week earlier '
            f"(alerting above a drop of {p.week_drop}).",
        },
        _service_quality(),
        {
            "alert": "RagpulseJudgeErrors",
            "expr": f"model:ragpulse_judge_requests:error_ratio_rate5m > {p.judge_error_ratio}\n"
            "and on (model)\n"
            f"  sum by (model) (increase(ragpulse_judge_requests_total[5m])) >= {p.judge_min_calls_5m}",
            "for": p.judge_errors_for,
            "severity": "warning",
            "summary": "Judge {{ $labels.model }} is failing",
            "description": "{{ $value | humanizePercentage }} of the calls to judge {{ $labels.model }} "
            f"failed over the last 5m (alerting above {p.judge_error_ratio:.0%}); failed "
            "evaluations are counted as errors, never as scores, so quality series thin out.",
        },
        {
            "alert": "RagpulseJudgeBudgetExhausted",
            "expr": "max by (job) (ragpulse_judge_budget_exhausted) == 1",
            "for": p.budget_for,
            "severity": "warning",
            "summary": "Judge budget spent: sampling is throttled",
            "description": "The judge budget (budget_calls_per_minute / budget_usd_per_hour) has been "
            f"spent for {p.budget_for}; sampling is lowered, so fewer interactions are scored.",
        },
        {
            "alert": "RagpulseConsumerLagGrowing",
            "expr": f"topic:ragpulse_consumer_lag:sum > {p.lag_messages}\n"
            "and\n  delta(topic:ragpulse_consumer_lag:sum[15m]) > 0",
            "for": p.lag_for,
            "severity": "warning",
            "summary": "ragpulse is falling behind on {{ $labels.topic }}",
            "description": '{{ $value | printf "%.0f" }} messages of {{ $labels.topic }} are not yet '
            f"committed and the lag has grown over 15m (alerting above {p.lag_messages}).",
        },
        {
            "alert": "RagpulseDeadLetters",
            "expr": f"sum by (reason) (increase(ragpulse_dead_letters_total[10m])) > {p.dead_letters_10m}",
            "for": p.dead_letters_for,
            "severity": "warning",
            "summary": "Input is being dead-lettered ({{ $labels.reason }})",
            "description": '{{ $value | printf "%.0f" }} inputs were dead-lettered with reason '
            "{{ $labels.reason }} in the last 10m "
            f"(alerting above {p.dead_letters_10m}).",
        },
        {
            "alert": "RagpulseEvaluationsStalled",
            "expr": "sum by (job) (rate(ragpulse_interactions_sampled_total[10m])) > 0\n"
            "unless on (job)\n  sum by (job) (rate(ragpulse_evaluations_total[10m])) > 0",
            "for": p.stalled_for,
            "severity": "critical",
            "summary": "Interactions are sampled but none is evaluated",
            "description": '{{ $value | printf "%.2f" }} interactions/s were sampled for evaluation '
            "over the last 10m and not one evaluation finished.",
        },
        {
            "alert": "RagpulseEvaluationBacklogStale",
            "expr": f"max by (job) (ragpulse_oldest_unfinished_seconds) > {p.oldest_unfinished_seconds}",
            "for": p.oldest_unfinished_for,
            "severity": "warning",
            "summary": "An interaction has waited too long to be scored",
            "description": "The oldest interaction taken in and not yet scored is {{ $value | "
            f"humanizeDuration }}}} old (alerting above {p.oldest_unfinished_seconds}s).",
        },
        {
            "alert": "RagpulseAgentDown",
            "expr": f'up{{job="{p.job}"}} == 0',
            "for": p.down_for,
            "severity": "critical",
            "summary": "ragpulse agent {{ $labels.instance }} is down",
            "description": "Prometheus cannot scrape the ragpulse agent {{ $labels.instance }}; "
            "its partitions move to the other replicas, and with none left nothing is scored.",
        },
        {
            "alert": "RagpulseAgentAbsent",
            "expr": f'absent(up{{job="{p.job}"}})',
            "for": p.absent_for,
            "severity": "critical",
            "summary": "No ragpulse agent is scraped",
            "description": f'Prometheus has no target for job "{p.job}": retrieval quality is '
            "not being watched at all.",
        },
    ]
    return [_alert(p, spec) for spec in alerts]


def _alert(p: RuleParams, spec: dict[str, Any]) -> dict[str, Any]:
    name = spec["alert"]
    return {
        "alert": name,
        "expr": spec["expr"],
        "for": p.for_override or spec["for"],
        "labels": {"severity": spec["severity"]},
        "annotations": {
            "summary": spec["summary"],
            "description": spec["description"],
            # Extra annotations a receiver may show on their own (the page's routes and metrics).
            **{key: spec[key] for key in ("routes", "metrics") if key in spec},
            "runbook_url": f"{p.runbook_base}#{name.lower()}",
        },
    }


def trust_rules(p: RuleParams) -> list[dict[str, Any]]:
    """Alerts on the prediction-powered estimates `ragpulse_quality_estimate{service,route,metric,
    bound}` (docs/trust.md): exported only for windows with enough human labels, so quiet unless
    labels flow in. Alerting on an interval bound fires on the true quality with confidence,
    however biased the judge is."""
    objective = p.trust_objective
    where = "{{ $labels.service }} {{ $labels.route }}"
    estimate = 'ragpulse_quality_estimate{metric="faithfulness", bound="%s"}'
    alerts = [
        {
            "alert": "RagpulseFaithfulnessBelowObjective",
            "expr": f"{estimate % 'high'} < {objective}",
            "for": p.trust_below_for,
            "severity": "critical",
            "summary": f"Faithfulness of {where} is below {objective}",
            "description": "Even the upper end of the 95% interval of true faithfulness is "
            '{{ $value | printf "%.3f" }} (judge scores corrected by human labels). See docs/trust.md.',
        },
        {
            "alert": "RagpulseFaithfulnessMayBeBelowObjective",
            "expr": f"{estimate % 'low'} < {objective}",
            "for": p.trust_may_be_below_for,
            "severity": "warning",
            "summary": f"Faithfulness of {where} may be below {objective}",
            "description": "The lower end of the 95% interval of true faithfulness fell to "
            '{{ $value | printf "%.3f" }}; label more interactions (label_sample_rate) to narrow it, '
            "or investigate. See docs/trust.md.",
        },
    ]
    return [_alert(p, spec) for spec in alerts]


def probe_rules(p: RuleParams) -> list[dict[str, Any]]:
    """Alerts on the golden probes and the judge canary (docs/probes.md): probe series are apart
    from production's, scored on every probe, so a regression shows at any traffic level."""
    window = p.probe_window
    graded = f'ragpulse_probe_items_total{{outcome=~"pass|fail"}}[{window}]'
    alerts = [
        {
            "alert": "RagpulseProbeItemsFailing",
            "expr": f'sum by (probe_set) (increase(ragpulse_probe_items_total{{outcome="fail"}}[{window}]))\n'
            f"  / sum by (probe_set) (increase({graded})) > {p.probe_fail_ratio}",
            "for": p.probe_for,
            "severity": "warning",
            "summary": "Golden probes of {{ $labels.probe_set }} are failing",
            "description": "{{ $value | humanizePercentage }} of the golden items of "
            f"{{{{ $labels.probe_set }}}} failed over {window} (context recall or answer correctness "
            f"below probes_pass_score; alerting above {p.probe_fail_ratio:.0%}). If "
            "RagpulseJudgeCanaryMoved fires too, the judge may have moved rather than the app.",
        },
        {
            "alert": "RagpulseProbeRequestsFailing",
            "expr": f"sum by (probe_set, reason) (increase(ragpulse_probe_failures_total[{window}])) > 0",
            "for": p.probe_failures_for,
            "severity": "warning",
            "summary": "Probes of {{ $labels.probe_set }} fail: {{ $labels.reason }}",
            "description": '{{ $value | printf "%.0f" }} golden item(s) of {{ $labels.probe_set }} were '
            f"not scored over {window} ({{{{ $labels.reason }}}}: timeout, http_error and no_answer "
            "from the prober's request; trace_missing when the app's spans never reached the agent).",
        },
        {
            "alert": "RagpulseProbesSilent",
            "expr": "sum by (probe_set) "
            f"(increase(ragpulse_probe_interactions_total[{p.probe_silent_window}])) == 0",
            "for": p.probe_silent_for,
            "severity": "warning",
            "summary": "No probe of {{ $labels.probe_set }} was scored",
            "description": f"No probe interaction of {{{{ $labels.probe_set }}}} was scored in "
            f"{p.probe_silent_window}: the prober (CronJob or sidecar) stopped, or its spans no longer "
            "reach the agent.",
        },
        {
            "alert": "RagpulseJudgeCanaryMoved",
            "expr": "max by (job) (ragpulse_canary_judge_moved) == 1",
            "for": "0m",
            "severity": "warning",
            "summary": "The judge moved on the canary set",
            "description": "The judge's agreement with the frozen human labels, or its mean score on "
            "them, moved beyond tolerance since the last accepted canary run. Quality drift alarms "
            "raised since then may be the judge's, not the app's: check ragpulse_canary_agreement "
            "and ragpulse_canary_mean_shift, and whether the probes' scores moved too.",
        },
        {
            "alert": "RagpulseJudgeCanaryStale",
            "expr": "time() - max by (job) (ragpulse_canary_last_run_timestamp_seconds) "
            f"> {p.canary_stale_seconds}",
            "for": "0m",
            "severity": "warning",
            "summary": "The judge canary has not run",
            "description": "No judge canary run finished in {{ $value | humanizeDuration }}; the judge "
            "is unwatched (ragpulse canary CronJob).",
        },
    ]
    return [_alert(p, spec) for spec in alerts]


# What a shift of each signal usually means, quoted by RagpulseSignalDrift (docs/runbooks.md).
SIGNAL_MEANINGS = {
    "retrieval_top_score": "the score the retriever gives its first chunk moved (either way): usually a "
    "changed embedding model, a rebuilt or swapped index, or a retriever scoring on a new scale",
    "retrieval_hit": "fewer retrievals return any chunk: usually an empty or broken index, or a filter "
    "that matches too little",
    "answered": "the app answers less often and refuses more: usually retrieval no longer finds what "
    "answers the questions, or the prompt or model changed",
    "overlap": "answers share fewer words with their context: the generator leaves the context (a "
    "prompt or model change, a truncated context, or chunks that no longer hold the answer)",
}


def _route_value(series: str, show: str, offset: str = "") -> str:
    """A template that quotes `series` of the alert's service and route, shown by `show`."""
    at = f" offset {offset}" if offset else ""
    return (
        f'{{{{ with printf "{series}{{service=%q,route=%q}}{at}" $labels.service $labels.route | query }}}}'
        f"{{{{ . | first | value | {show} }}}}{{{{ end }}}}"
    )


def _share(counter: str, window: str) -> dict[str, str]:
    """The share of interactions a counter of the signals counts, pooled across replicas."""
    name = counter.removesuffix("_total")
    return {
        "record": f"service_route:{name}:ratio_rate{window}",
        "expr": f"sum by ({ROUTE_KEY}) (rate({counter}[{window}]))\n/\n"
        f"sum by ({ROUTE_KEY}) (rate(ragpulse_interactions_total[{window}]))",
    }


def signal_recording_rules(p: RuleParams) -> list[dict[str, str]]:
    windows = (p.signal_recent, p.signal_history)
    return [
        *(
            {
                "record": f"service_route:ragpulse_interactions:increase{window}",
                "expr": f"sum by ({ROUTE_KEY}) (increase(ragpulse_interactions_total[{window}]))",
            }
            for window in windows
        ),
        *(
            _share(counter, window)
            for counter in ("ragpulse_empty_retrievals_total", "ragpulse_refusals_total")
            for window in windows
        ),
    ]


def _share_rising(
    p: RuleParams,
    *,
    alert: str,
    counter: str,
    floor: float,
    for_: str,
    severity: str,
    summary: str,
    what: str,
) -> dict[str, Any]:
    """The share of interactions that `counter` counts, well above the same route's share over the
    day before (so healthy traffic never alerts, whatever its usual level) and above a floor."""
    recent, history = p.signal_recent, p.signal_history
    share = f"service_route:{counter.removesuffix('_total')}:ratio_rate"
    count = "service_route:ragpulse_interactions:increase"
    where = "{{ $labels.service }} {{ $labels.route }}"
    baseline = _route_value(share + history, "humanizePercentage", offset=recent)
    interactions = _route_value(count + recent, 'printf "%.0f"')
    return {
        "alert": alert,
        # A baseline of 0 (no such interaction the day before) leaves the floor to decide.
        "expr": f"{share}{recent}\n"
        f"  > on ({ROUTE_KEY}) {p.signal_rise:g} * {share}{history} offset {recent}\n"
        f"and on ({ROUTE_KEY})\n  {share}{recent} > {floor:g}\n"
        f"and on ({ROUTE_KEY})\n  {count}{recent} >= {p.signal_min_interactions_recent}\n"
        f"and on ({ROUTE_KEY})\n  {count}{history} offset {recent} >= {p.signal_min_interactions_history}",
        "for": for_,
        "severity": severity,
        "summary": f"{summary} on {where}",
        "description": f"{{{{ $value | humanizePercentage }}}} of the interactions of {where} {what} over "
        f"the last {recent}, against {baseline} over the {history} before, on {interactions} "
        f"interactions (alerting above {p.signal_rise:g} times the share of the {history} before "
        f"and above {floor:.0%}, for {for_}).",
    }


def signal_alert_rules(p: RuleParams) -> list[dict[str, Any]]:
    """Alerts on the signals measured on every interaction, before sampling, without a judge
    (docs/metrics.md): they see a retrieval regression sooner than sampled, judged scores do, and
    see what judged scores cannot (an empty retrieval or a refusal is never scored)."""
    signal = "{{ $labels.signal }} of {{ $labels.service }} {{ $labels.route }}"
    meaning = "".join(
        f'{{{{ {"if" if i == 0 else "else if"} eq $labels.signal "{name}" }}}}{text}'
        for i, (name, text) in enumerate(SIGNAL_MEANINGS.items())
    )
    meaning += "{{ else }}see the runbook{{ end }}"
    evidence = (
        '{{ with printf "max(ragpulse_signal_drift_score{service=%q,route=%q,signal=%q})" '
        "$labels.service $labels.route $labels.signal | query }}"
        '{{ . | first | value | printf "%.2f" }}{{ end }}'
    )
    alerts = [
        {
            "alert": "RagpulseSignalDrift",
            "expr": f"max by ({ROUTE_KEY}, signal) (ragpulse_signal_drift_detected) == 1",
            "for": p.signal_drift_for,
            "severity": "warning",
            "summary": f"{signal} shifted from its baseline",
            "description": "The agent's drift detector (CUSUM confirmed by a window test) flags a shift "
            f"of {signal}, measured on every interaction without a judge: {meaning}. Evidence "
            f"{evidence} (1 at the alarm threshold).",
        },
        _share_rising(
            p,
            alert="RagpulseEmptyRetrievals",
            counter="ragpulse_empty_retrievals_total",
            floor=p.empty_retrievals_floor,
            for_=p.empty_retrievals_for,
            # An empty retrieval is never scored (the judged metrics skip it): nothing else pages.
            severity="critical",
            summary="Empty retrievals are rising",
            what="had an empty retrieval",
        ),
        _share_rising(
            p,
            alert="RagpulseRefusalsRising",
            counter="ragpulse_refusals_total",
            floor=p.refusals_floor,
            for_=p.refusals_for,
            severity="warning",
            summary="Refusals are rising",
            what="were answered with a refusal",
        ),
    ]
    return [_alert(p, spec) for spec in alerts]


def rule_groups(p: RuleParams | None = None) -> list[dict[str, Any]]:
    p = p or RuleParams()
    # One group: rules of a group run in order at the same timestamp, so every alert reads the
    # recording rules of this evaluation (across groups it could read the previous one).
    return [
        {"name": "ragpulse", "rules": [*recording_rules(p), *alert_rules(p)]},
        {"name": "ragpulse-trust", "rules": trust_rules(p)},
        {"name": "ragpulse-probes", "rules": probe_rules(p)},
        {"name": "ragpulse-signals", "rules": [*signal_recording_rules(p), *signal_alert_rules(p)]},
    ]


class _Dumper(yaml.SafeDumper):
    pass


def _block_strings(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _block_strings)

HEADER = "# Generated by deploy/prometheus/generate_rules.py; edit that file, not this one.\n"


def render_rules(p: RuleParams | None = None) -> str:
    body = yaml.dump({"groups": rule_groups(p)}, Dumper=_Dumper, sort_keys=False, width=100_000)
    return HEADER + body


def render_prometheus_rule(p: RuleParams | None = None) -> str:
    resource = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "ragpulse",
            "labels": {"app.kubernetes.io/name": "ragpulse", "release": "prometheus"},
        },
        "spec": {"groups": rule_groups(p)},
    }
    return HEADER + yaml.dump(resource, Dumper=_Dumper, sort_keys=False, width=100_000)


def outputs(p: RuleParams | None = None) -> dict[Path, str]:
    return {RULES_FILE: render_rules(p), K8S_RULE_FILE: render_prometheus_rule(p)}


def _params(assignments: list[str]) -> RuleParams:
    fields = {f.name: f for f in dataclasses.fields(RuleParams)}
    values: dict[str, Any] = {}
    for assignment in assignments:
        name, _, raw = assignment.partition("=")
        if name not in fields:
            raise SystemExit(f"unknown parameter {name!r}; choose from {sorted(fields)}")
        default = getattr(RuleParams(), name)
        values[name] = type(default)(raw) if default is not None else raw
    return RuleParams(**values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files differ")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a RuleParams field")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs(_params(args.set)).items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        print(f"{path.relative_to(ROOT)} is out of date: run python deploy/prometheus/generate_rules.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
