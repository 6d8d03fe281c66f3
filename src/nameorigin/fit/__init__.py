"""One training of one network: the LightningModule, its callbacks, the fast path, checkpoints, preemption,
resume, timing, the dashboard and the trackers. Nothing here knows about the run's stages or its evaluation."""
