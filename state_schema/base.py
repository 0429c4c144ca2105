"""The base of every model in the payload and the training contract."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Unknown fields are errors: a typo in a hyperparameter must not pass silently."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
