"""Code that more than one benchmark runs; benchmarks import it from here, never from each other.

    labelled   the rules and sets of the out-of-sample agreement tables (judge_agreement, judge_ablation)
    heldout    the public held-out files: RAGTruth QA halves and ARES's human-annotated set
    workload   judge_economy's interactions (~160-token chunks), also stream.py's load
    kafka_rig  a steady producer, a /healthz stall probe and a scored agent (soak, broker_outage)

The labelled shared samples themselves are read by tests/support/labelled.py, which the tests use
too.
"""
