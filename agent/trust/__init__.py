"""Trust: human labels, judge calibration and prediction-powered estimates of the true quality.

- `labels`: human labels from a JSONL file or from annotation spans in the stream.
- `agreement`: how well a judge agrees with the labels (AUROC, balanced accuracy, F1, bootstrap CIs).
- `calibration`: a fitted map from judge score to the probability that a human says "yes".
- `ppi`: prediction-powered inference of the true mean with a confidence interval.
- `label_sampling`: which interactions to send to humans, and with what weight.
- `aggregator`: the streaming PPI estimate per service, route, metric and window.
"""
