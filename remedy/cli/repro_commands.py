"""remedy repro BUNDLE: replay a captured failing step on CPU and localise it.

    remedy repro BUNDLE [--json] [--debug]

BUNDLE is a folder the NaN guard wrote (a job's repro/step-NNNNNN, named in the finding).
Exit 0 when the non-finite value reappears, 1 when the replay stays finite.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from remedy.cli.errors import UsageError

EXIT_REPRODUCED, EXIT_NOT_REPRODUCED = 0, 1


def cmd_repro(args: argparse.Namespace) -> int:
    import torch

    from remedy.training.bundle import BundleError
    from remedy.training.replay import debug, replay

    torch.set_num_threads(1)  # a replay is one step: threads only add nondeterminism and waits
    try:
        result = replay(args.bundle)
    except BundleError as error:
        raise UsageError(str(error)) from None
    print(json.dumps(result.to_json(), indent=2) if args.json else result.summary(), flush=True)
    if args.debug:
        if result.first is None:
            raise UsageError(f"{args.bundle}: no module went non-finite; nothing to debug")
        debug(args.bundle, result)
    return EXIT_REPRODUCED if result.reproduced else EXIT_NOT_REPRODUCED


def register(commands: Any) -> None:
    repro = commands.add_parser(
        "repro", help="replay a NaN guard's repro bundle on CPU and name the first bad module"
    )
    repro.add_argument("bundle", help="bundle folder (a job's repro/step-NNNNNN)")
    repro.add_argument("--json", action="store_true", help="print the result as JSON")
    repro.add_argument(
        "--debug", action="store_true", help="replay again and stop in pdb at that module"
    )
    repro.set_defaults(handler=cmd_repro)
