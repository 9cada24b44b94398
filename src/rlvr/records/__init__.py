"""What a run leaves behind to read later: its report (``report``) and what it learned (``learning``),
a sweep's table (``sweep_report``), a resumed run's history (``run_history``) and its provenance."""
