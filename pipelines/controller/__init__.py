"""The controller process: one control epoch over the job's load reports, one recorded decision out, with
metrics and leader election (`windjoin controller`)."""
