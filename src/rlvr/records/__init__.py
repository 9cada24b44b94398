"""What a run leaves behind to read later: its report, a sweep's table, a resumed run's history and provenance."""
