"""Prints its metrics as a classic script does (the log is all remedy gets of them), and
writes its own final figures into result.json."""

import json
import sys

from tests.jobs.entry_points.common import parse, report_step

params, out = parse()
report_step(out, 5)
print("end of epoch 1 | valid loss 5.20 | valid ppl 181.3", flush=True)
report_step(out, 10)
print("end of epoch 2 | valid loss 5.00 | valid ppl 148.4", flush=True)
print("progress 50%\rprogress 100% valid ppl 140.0", flush=True)  # a bar rewrites its line
result = {
    "status": "Completed",
    "steps": 10,
    "final_train_loss": 0.5,
    "metrics": {"bleu": 21.5, "valid:perplexity": 1.0, "broken": None},
}
(out / "result.json").write_text(json.dumps(result))
sys.stdout.write("End of training | test loss 4.90 | test ppl 134.3")  # no final newline
