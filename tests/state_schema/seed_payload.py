"""The original workflow's final payload, verbatim (from the published sample's real run)."""

SEED_FINAL_PAYLOAD = {
    "state": {
        "history": {
            "num_warmup_adjustments": 5,
            "num_batch_layer_adjustments": 1,
            "num_retraining": 7,
            "latest_job_name": "complex-resnet-model-2021-Jan-27-06h-45m-19",
            "num_learning_rate_adjustments": 0,
            "num_monitor_transitions": 16,
        },
        "next_action": "end",
        "job_status": "Completed",
        "run_spec": {
            "sm_role": "arn:aws:iam::111111111111:role/lambda-sagemaker-train",
            "bucket": "example-sagemaker-debugger-model-automation",
            "add_batch_norm": 1,
            "warmup_learning_rate": 0.003125,
            "base_job_name": "complex-resnet-model",
            "region": "us-west-2",
            "learning_rate": 0.1,
            "instance_type": "ml.m5.xlarge",
            "num_epochs": 5,
            "debugger_save_interval": 100,
        },
        "rule_status": "InProgress",
    }
}
