# a small run: fewer iterations, a short warmup
max_iters = 120
lr_decay_iters = 120
warmup_iters = 5
