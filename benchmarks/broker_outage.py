"""Event-loop stalls while the Kafka broker does not answer.

A real Tansu broker, a redis-server, the test judge server and `ragpulse run` consuming a topic
fed at 5 interactions/s; after a minute the broker is frozen (SIGSTOP) for 20 s and resumed, a
given number of times. /healthz of the agent is polled every 100 ms from a separate process (a
thread of this one would share its interpreter lock with the producer and time it as the
agent's). Reported: the longest /healthz answer and the number of answers.

    python benchmarks/broker_outage.py [--freezes 2] [--seconds 20]
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common.kafka_rig import Producer, StallProbe, log, start_agent
from benchmarks.harness import Benchmark, line
from tests.support.kafka_broker import kafka_broker
from tests.support.llm_server import FakeLLMServer
from tests.support.redis_server import redis_server


def main() -> None:
    bench = Benchmark(__doc__)
    parser = bench.parser
    parser.add_argument("--freezes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each freeze lasts")
    args = bench.parse()
    with tempfile.TemporaryDirectory() as tmp, kafka_broker(Path(tmp)) as broker, redis_server() as redis, \
            FakeLLMServer(latency=0.1) as judge:  # fmt: skip
        assert broker.process is not None, "broker freezes need the Tansu broker"
        topic, results = broker.create_topic(partitions=4), broker.create_topic(partitions=1)
        agent = start_agent(broker, topic, results, "outage", redis, judge)
        probe = StallProbe()
        probe.watch(agent)
        producer = Producer(broker.bootstrap, topic, 5.0)
        producer.start()
        try:
            time.sleep(60)
            for n in range(args.freezes):
                log(f"freeze {n + 1}: broker stopped for {args.seconds:g} s")
                broker.process.send_signal(signal.SIGSTOP)
                time.sleep(args.seconds)
                broker.process.send_signal(signal.SIGCONT)
                time.sleep(20)
        finally:
            broker.process.send_signal(signal.SIGCONT)
            producer.stop()
            probe.stop()
            agent.stop()
            agent.kill()
    at = time.strftime("%H:%M:%S", time.localtime(probe.longest_at))
    line(f"broker freezes          {args.freezes} x {args.seconds:g} s")
    line(f"longest /healthz (s)    {probe.longest:.3f} over {probe.samples} probes (at {at})")


if __name__ == "__main__":
    main()
