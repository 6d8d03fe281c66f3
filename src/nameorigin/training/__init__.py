"""Training: the LightningModule, callbacks and dashboard, calibration fit, refit, model card, pipeline."""
