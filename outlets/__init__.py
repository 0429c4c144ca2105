"""Where a run shows: messages and notifications (apprise), Prefect artifacts and events,
the HTML report, the report server and its upload, the leaderboard. They read the run's
store (records/); nothing below them imports them."""
