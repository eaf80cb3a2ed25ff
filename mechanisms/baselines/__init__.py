"""The baselines the papers compare against that are not a ledger plus the release rule: SPAS,
PLBU and the local-DP family (OUE, LBU, LSP, LBD, LBA, LPU, LPD, LPA, MTSP-LDP). Each steps
through the same ``step(cells)`` interface as the central mechanisms
(:class:`mechanisms.run.mechanism.Stepper`)."""
