"""Callbacks for training frameworks, each an optional extra (nothing here is imported by
`import remedy.debugger`):

    remedy.debugger.integrations.lightning.RemedyCallback     remedy-train[lightning]
    remedy.debugger.integrations.transformers.RemedyCallback  remedy-train[transformers]

Each drives the explicit Hook's writer at the framework's own points (common.py): one TRAIN
step per optimizer update, numbered by the framework's global step, EVAL steps for
evaluation batches, and asks the framework to stop when REMEDY_STOP_FILE appears.
"""
