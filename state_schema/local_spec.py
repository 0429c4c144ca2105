"""run_spec.local: the local backend's own fields (processes on this machine).

Earlier payloads give them at the top of run_spec; RunSpec still reads them there (see
LEGACY_FIELDS in run_spec.py) and writes them here.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from remedy.state_schema.base import Strict


class LocalSpec(Strict):
    """How each job runs here: its GPUs, and a TensorBoard copy of what it saves."""

    model_config = ConfigDict(title="Local")  # the name the run form's toggle shows

    tensorboard: bool = Field(
        False,
        description="Also write what the debugger saves as TensorBoard event files in each "
        "job's folder (`tensorboard --logdir RUN_DIR/jobs`).",
    )
    gpus_per_job: int | None = Field(
        None,
        ge=0,
        description="GPUs each job gets, its own (CUDA_VISIBLE_DEVICES); a job waits while "
        "every GPU is taken by other jobs. null: one when the machine has any, else none; "
        "0: the CPU only.",
    )
