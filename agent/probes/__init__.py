"""Golden probes and the judge canary (docs/probes.md).

- `prober`: sends a golden set through the live app over HTTP, each request in a trace of its own
  whose root span carries the golden item (agent/otlp/probes.py); `ragpulse probe` runs it.
- `scoring` and `results`: in the agent, a probe interaction is scored with the reference-based
  metrics beside the reference-free ones, and recorded in the probe series only.
- `canary`: re-judges a frozen human-labelled set and says whether the judge moved;
  `ragpulse canary` runs it.
"""
