from tests.jobs.entry_points.common import parse

parse()
print("loading data ...", flush=True)
raise RuntimeError("shapes do not match: 3 != 4")
