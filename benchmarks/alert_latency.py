"""Quality drop -> page latency through a real Prometheus and Alertmanager.

The harness of tests/integration/test_alerting.py: an agent on OTLP/HTTP with the local judge,
Prometheus (Debian `prometheus`) scraping and evaluating every second with the generated rules,
Alertmanager (Debian `prometheus-alertmanager`) with the committed routing, a webhook receiver.
Each trial uses a fresh service: 40 supported answers, then 40 unsupported ones sent at once (the
drop); the clock runs from the drop until RagpulseQualityBelowThreshold reaches the webhook.

What it measures is the pipeline's own delay (score, scrape, evaluate, notify) with `for:` set to
`--for` (2s) and Alertmanager's group_wait at 1s; in production add the rules' `for:` (15m for
this alert), group_wait (30s) and up to one scrape and one evaluation interval (15s each).

    python benchmarks/alert_latency.py [--trials 5]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import Benchmark, line
from tests.support.agent_process import AgentProcess
from tests.support.alerting import ALERTMANAGER, PROMETHEUS, AlertingStack, missing_binaries, send


def main() -> None:
    bench = Benchmark(__doc__, description=__doc__.splitlines()[0])
    parser = bench.parser
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--for", dest="for_", default="2s", help="`for:` of every alert during the run")
    args = bench.parse()
    missing = missing_binaries(PROMETHEUS, ALERTMANAGER)
    if missing:
        sys.exit(missing)
    # Absolute thresholds are opt-in (docs/runbooks.md): this one is what the trials cross.
    agent = AgentProcess(env={"RAGPULSE_ALERT_THRESHOLDS": "faithfulness=0.8"})
    with tempfile.TemporaryDirectory() as workdir:
        stack = AlertingStack(Path(workdir), [agent], for_override=args.for_)
        try:
            agent.wait_ready()
            stack.start()
            latencies = []
            for trial in range(args.trials):
                service = f"trial-{trial}"
                labels = {"service": service, "metric": "faithfulness"}
                send(agent, 0, 40, good=True, service=service)
                stack.wait_scraped(f'ragpulse_score_count{{service="{service}",metric="faithfulness"}}', 40)
                dropped = time.monotonic()
                send(agent, 40, 40, good=False, service=service)
                arrived, _ = stack.wait(
                    "the quality alert",
                    lambda labels=labels: stack.webhook.first("RagpulseQualityBelowThreshold", **labels),
                )
                latencies.append(arrived - dropped)
                line(f"trial {trial}: drop -> webhook {arrived - dropped:.1f}s", flush=True)
        finally:
            stack.stop()
            agent.kill()
    line(
        f"{len(latencies)} trials, `for: {args.for_}`, 1s scrape and evaluation, group_wait 1s: "
        f"median {statistics.median(latencies):.1f}s, min {min(latencies):.1f}s, max {max(latencies):.1f}s"
    )


if __name__ == "__main__":
    main()
