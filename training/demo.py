"""The run_spec `remedy demo` starts from: the seed scenario, small enough for 2 CPU cores.

Everything that matters to the scenario is the seed's: ELU ResNet-20 without batch norm,
SGD momentum 0.9, warmup and learning rate 0.1, the seed's schedule and 5 epochs. Made
smaller: width 8 (stacks of 8/16/32 filters instead of 16/32/64), batch 64 instead of 128, and
5000 synthetic training images (1000 test). The dynamics are real: nothing injects NaN.

Measured with benchmarks/explosion_sweep.py (each attempt a fresh `python -m remedy.training.train`
process; torch's default 2 threads; 2-core machine shared with other work, load ~1.8).
Steps count updates from 1 (the debugger's hook counts from 0: step n here is hook step n-1).

  attempt (seed ladder)        outcome without intervention
  warmup 0.1      no BN        NaN gradients at update 3 (epoch 0); loss at init ~67
  warmup 0.05     no BN        NaN gradients at update 3 (epoch 0)
  warmup 0.025    no BN        NaN gradients at update 3 (epoch 0)
  warmup 0.0125   no BN        NaN gradients at update 3 (epoch 0)
  warmup 0.00625  no BN        NaN gradients at update 4 (epoch 0)
  warmup 0.003125 no BN        NaN gradients at update 5 (epoch 0)
  warmup 0.003125 batch norm   finite throughout; 395 steps (5 x 79); test accuracy by epoch
                               0.395, 0.322, 0.876, 0.991, 0.993 (chance: 0.10)

Why every rung fails: without normalisation each residual block adds its output to the
stream, so activations grow through the 9 blocks and the initial logits are huge (loss ~67);
the first updates overshoot even at warmup 0.003125. Below the ladder, warmup 0.001 still
explodes (update 13) and 0.0003 survives the first epoch (in-process probe, not a rung).
Nothing ever recovers once NaN: the weights stay NaN, so every later gradient is NaN too.
With debugger_save_interval 5 the first gradients saved after the explosion are at hook step
5, where all 44 gradient tensors are non-finite (checked for warmup 0.1 and 0.003125).

Timings (2 threads): an exploding attempt stopped at once lasts 3.7-4.5 s wall (about 3 s of
it process start: Python, torch import, 6000 synthetic images, model), ~4.5 s CPU. The batch
norm run: 34.4 s wall, 64 s CPU, 0.077 s/step (36.8 s with the debugger hook saving losses
every step and gradients every 5). All 7 attempts: 59 s wall, 92 s CPU. With
REMEDY_TORCH_THREADS=1: 0.136 s/step, batch norm run 58 s, all 7 attempts 86 s wall, 84 s CPU.
Two torch threads on a 2-core machine that is busy with other processes (the rule
evaluator, Prefect) can slow down by up to 10x as the threads wait on each other; one thread
degrades gracefully. Batch 32 was rejected: at learning rate 0.1 two of three seeds stalled
at chance accuracy with batch norm; batch 64 learned on all four seeds tried (final test
accuracy 0.926-0.996).
"""

from remedy.state_schema import RunSpec, exploding_tensor_rule

DEMO_RUN_SPEC = RunSpec(
    base_job_name="remedy-demo",
    # the seed scenario: ELU ResNet-20 without batch norm, SGD momentum, its rates and epochs
    depth=20,
    activation="elu",
    add_batch_norm=0,
    optimizer="momentum",
    momentum=0.9,
    weight_decay=2e-4,
    warmup_learning_rate=0.1,
    learning_rate=0.1,
    warmup_epochs=1,
    num_epochs=5,
    # made smaller, for 2 CPU cores
    width=8,
    batch_size=64,
    dataset="synthetic",
    train_samples=5000,
    test_samples=1000,
    debugger_save_interval=5,  # explosions happen by update 5: catch them at hook step 5
    # The demo shows the original path: the debugger's ExplodingTensor rule spots the NaN
    # gradients. With the NaN guard on, the job would catch them itself before the update.
    nan_guard="off",
    # The seed's only rule, named: the demo reproduces the original seven launches, which
    # the default rules (the recommended preset) need not.
    rules=[exploding_tensor_rule()],
)
