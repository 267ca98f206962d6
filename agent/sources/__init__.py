"""Sources deliver decoded span batches to the pipeline's Intake."""
